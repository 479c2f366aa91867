"""TPU slice types ("v5p-64") and what they mean in hosts and chips.

A slice type's suffix counts TensorCores on generations with two per chip (v2, v3, v4,
v5p, v7x) and chips on v5e (`v5litepod`) and v6e. Hosts carry four chips, except that a
v5e or v6e slice of at most eight chips is a single host. These are the rules Google's
TPU documentation states and Ray's TPU support applies when it labels nodes; they live
here, without Ray, so that loading a BUILD file can check a type and planning can say
how many hosts a step needs.
"""

from __future__ import annotations

from dataclasses import dataclass

GENERATIONS = ("v2", "v3", "v4", "v5p", "v5litepod", "v6e", "v7x")
_ONE_CORE_PER_CHIP = ("v5litepod", "v6e")
_CHIPS_PER_HOST = 4
_LARGEST_SINGLE_HOST = 8  # v5e and v6e hosts hold up to 8 chips


@dataclass(frozen=True)
class TpuSlice:
    """One slice of a TPU type: `hosts` machines of `chips_per_host` chips each."""

    type: str
    generation: str
    chips: int
    chips_per_host: int

    @property
    def hosts(self) -> int:
        return self.chips // self.chips_per_host

    @property
    def head_resource(self) -> str:
        """The Ray resource only worker 0 of a slice of this type has (one per slice)."""
        return f"TPU-{self.type}-head"

    @property
    def ray_accelerator_type(self) -> str:
        """Ray's accelerator type label of the generation, e.g. TPU-V5P."""
        return f"TPU-{self.generation.upper()}"


def is_tpu_type(text: str | None) -> bool:
    return text is not None and text.startswith(GENERATIONS)


def tpu_slice(type_: str) -> TpuSlice:
    """Parse a slice type such as "v5p-64" or "v6e-8"; ValueError names the valid forms."""
    generation, _, size = type_.partition("-")
    if generation not in GENERATIONS or not size.isdigit() or int(size) == 0:
        raise ValueError(
            f"'{type_}' is not a TPU slice type; expected GENERATION-SIZE with GENERATION one of "
            f"{', '.join(GENERATIONS)} (e.g. v5p-64, v6e-8)"
        )
    cores_per_chip = 1 if generation in _ONE_CORE_PER_CHIP else 2
    chips = max(1, int(size) // cores_per_chip)
    per_host = (
        chips if generation in _ONE_CORE_PER_CHIP and chips <= _LARGEST_SINGLE_HOST else min(chips, _CHIPS_PER_HOST)
    )
    if chips % per_host:
        raise ValueError(f"'{type_}' has {chips} chips, not a whole number of {per_host}-chip hosts")
    return TpuSlice(type_, generation, chips, per_host)
