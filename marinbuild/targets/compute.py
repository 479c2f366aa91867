"""What a step's FLOPs cost in accelerator-hours, before it runs.

A rule that trains declares its FLOPs (`Rule.flops`: steps × batch × sequence × FLOPs per
token, from the target's attributes); its `resources` say on which accelerator and how
many chips. An estimate is then the FLOPs over the chips' peak rate times an assumed
utilisation (the model FLOPs utilisation, MFU): accelerator-hours are chip-hours, so they
do not depend on how many chips share the work; the wall time does.

Peak rates are dense bf16 matrix FLOP/s per chip, as the vendors state them (NVIDIA's
datasheets quote them "with sparsity", twice the dense figure: halved here):

- TPU v4: 275 TFLOP/s (cloud.google.com/tpu/docs/v4)
- TPU v5e: 197 TFLOP/s (cloud.google.com/tpu/docs/v5e)
- TPU v5p: 459 TFLOP/s (cloud.google.com/tpu/docs/v5p)
- TPU v6e (Trillium): 918 TFLOP/s (cloud.google.com/tpu/docs/v6e)
- A100 SXM: 312 TFLOP/s (NVIDIA A100 datasheet)
- H100 SXM: 989 TFLOP/s (NVIDIA H100 datasheet: 1,979 with sparsity)
- H200 SXM: 989 TFLOP/s (NVIDIA H200 datasheet: 1,979 with sparsity)
- B200: 2,250 TFLOP/s (NVIDIA DGX B200 datasheet: 72 PFLOP/s FP8 with sparsity for 8 GPUs,
  i.e. 4.5 PFLOP/s dense FP8 and 2.25 dense bf16 per GPU)

The default utilisation is 0.4 on every kind: what large dense trainings reach on both
(PaLM's 46% on TPU v4, Llama 3's 38-43% on H100, MaxText's published 40-60% on v5p) and a
round number a team replaces with its own. The workspace's `utilisation` setting (a
fraction, or a table by kind) and `build --utilisation` override it; the estimate records
the fraction it assumed, so `show` and the report set it beside the time measured.

A step that asks for no accelerator (the CPU-scale experiments here) costs no
accelerator-hours: its estimate gives its FLOPs and says "no accelerator".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from marinbuild.targets.rule import Resources, Target

DEFAULT_UTILISATION = 0.4


@dataclass(frozen=True)
class Accelerator:
    """A kind of accelerator chip: its dense bf16 peak and the utilisation assumed on it."""

    kind: str
    peak_flops: float  # dense bf16 FLOP/s per chip
    utilisation: float = DEFAULT_UTILISATION


ACCELERATORS = {
    accelerator.kind: accelerator
    for accelerator in (
        Accelerator("v4", 275e12),
        Accelerator("v5e", 197e12),
        Accelerator("v5p", 459e12),
        Accelerator("v6e", 918e12),
        Accelerator("A100", 312e12),
        Accelerator("H100", 989e12),
        Accelerator("H200", 989e12),
        Accelerator("B200", 2250e12),
    )
}
# A TPU generation as a slice type names it ("v5litepod-16") and as people do ("v5e").
_TPU_KINDS = {"v5litepod": "v5e"}

# The utilisation to assume: one fraction for every kind, or fractions by kind; None: the table's.
Utilisation = float | Mapping[str, float] | None


def check_utilisation(value: Any, where: str) -> Utilisation:
    """A utilisation setting as given (a number, or a table by kind), checked: a ValueError
    names `where` and what is wrong."""
    if value is None:
        return None
    values = value if isinstance(value, Mapping) else {"": value}
    for kind, fraction in values.items():
        if kind and kind not in ACCELERATORS:
            raise ValueError(f"{where}: unknown accelerator kind {kind!r}; known: {', '.join(ACCELERATORS)}")
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise ValueError(f"{where}: a utilisation is a fraction in (0, 1], got {fraction!r}")
    return dict(value) if isinstance(value, Mapping) else float(value)


def chips(resources: Resources) -> tuple[str, int] | None:
    """The accelerator kind `resources` asks for (a key of ACCELERATORS, or the name as
    given when the table lacks it) and how many chips in all; None if it asks for none."""
    wanted = resources.accelerator
    if not wanted:
        return None
    tpu = resources.tpu
    if tpu is not None:
        return _TPU_KINDS.get(tpu.generation, tpu.generation), tpu.chips * resources.slices
    kind = next((kind for kind in ACCELERATORS if kind.lower() in wanted.lower()), wanted)
    return kind, max(1, resources.accelerator_count) * resources.hosts


@dataclass(frozen=True)
class Estimate:
    """What a step would cost: its FLOPs, and on `chips` chips of `accelerator` at
    `utilisation`, its accelerator-hours (chip-hours) and wall-clock hours. `hours` is None
    when the kind's peak is unknown or the FLOPs are (`note` says which); 0 without an
    accelerator."""

    flops: float | None
    accelerator: str | None = None
    chips: int = 0
    utilisation: float | None = None
    hours: float | None = None
    note: str | None = None

    @property
    def wall_hours(self) -> float | None:
        return None if self.hours is None or not self.chips else self.hours / self.chips

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"flops": self.flops, "accelerator_hours": self.hours}
        if self.accelerator is not None:
            found |= {"accelerator": self.accelerator, "chips": self.chips, "utilisation": self.utilisation}
        return found | ({"note": self.note} if self.note else {})

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Estimate:
        return cls(
            value.get("flops"),
            value.get("accelerator"),
            value.get("chips", 0),
            value.get("utilisation"),
            value.get("accelerator_hours"),
            value.get("note"),
        )

    def describe(self) -> str:
        """One line: "3.1e+20 FLOPs on 32 v5p chips at 40% utilisation: 4,700 accelerator-hours (147 h)"."""
        if self.flops is None:
            return f"no estimate: {self.note}"
        flops = f"{self.flops:.3g} FLOPs"
        if self.accelerator is None:
            return f"{flops}, no accelerator"
        on = f"{flops} on {self.chips} {self.accelerator} chip{'s' if self.chips != 1 else ''}"
        if self.hours is None:
            return f"{on}: no estimate ({self.note})"
        wall = hours_text(self.wall_hours or 0.0)
        return f"{on} at {self.utilisation:.0%} utilisation: {hours_text(self.hours)} accelerator-hours ({wall} h)"

    def against(self, duration_s: float | None) -> str:
        """The estimate beside the time a run measured, and the utilisation that time
        implies: what a team sets (`utilisation`) to estimate its next runs better."""
        if duration_s is None or not duration_s or self.hours is None or not self.chips or self.utilisation is None:
            return self.describe()
        took = duration_s / 3600 * self.chips
        implied = self.utilisation * self.hours / took
        return (
            f"{self.describe()}; took {hours_text(took)} accelerator-hours ({hours_text(duration_s / 3600)} h), "
            f"as if at {implied:.1%} utilisation"
        )


def hours_text(hours: float) -> str:
    """Hours as people read them: 3 significant digits under 100, whole hours with commas above."""
    return f"{hours:,.0f}" if hours >= 100 else f"{hours:.3g}"


def estimate(
    target: Target, lookup: Callable[[str], Target | None], utilisation: Utilisation = None
) -> Estimate | None:
    """The cost of running `target` (None if its rule declares no FLOPs); `lookup` gives the
    targets it names (its data, the model it starts from), whose attributes may say what
    its own do not (a vocabulary's size)."""
    if target.rule.flops is None:
        return None
    flops = target.rule.flops(target.attrs, lookup)
    asked = chips(target.resources)
    if flops is None:
        return Estimate(None, note="its FLOPs depend on what only its inputs' outputs say (a checkpoint's shape)")
    if asked is None:
        return Estimate(flops, hours=0.0)
    kind, count = asked
    accelerator = ACCELERATORS.get(kind)
    if accelerator is None:
        return Estimate(flops, kind, count, note=f"no peak rate known for {kind}; known: {', '.join(ACCELERATORS)}")
    assumed = _assumed(accelerator, utilisation)
    return Estimate(flops, kind, count, assumed, flops / (accelerator.peak_flops * assumed) / 3600)


def _assumed(accelerator: Accelerator, utilisation: Utilisation) -> float:
    if utilisation is None:
        return accelerator.utilisation
    if isinstance(utilisation, Mapping):
        return float(utilisation.get(accelerator.kind, accelerator.utilisation))
    return float(utilisation)
