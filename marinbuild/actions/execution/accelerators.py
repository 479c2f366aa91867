"""What accelerators this machine has, for steps that ask for one and run here.

A target's `resources` may ask for a GPU kind (`gpu("H100", 8)`) or a TPU slice
(`tpu("v5p-64")`). The Ray executor places such a step on a host that has it; the local
scheduler can only run it here, where JAX would silently fall back to the CPU. So a
local build refuses a step whose accelerator this machine lacks, unless the user says
`--allow-cpu`.

The probe is cheap on purpose — importing JAX to ask it costs seconds, and planning
must not: `nvidia-smi -L` (GPU names) where it is installed, else the device files
(`/dev/nvidia<N>`); `/dev/accel<N>` or `/dev/vfio/<N>` for TPU chips. The environment
variable MARINBUILD_ACCELERATORS overrides it (tests, or a probe that gets it wrong):
`none`, or a comma-separated list such as `gpu:H100:8` or `tpu:4` (four TPU chips).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from marinbuild.errors import WorkspaceError
from marinbuild.targets.rule import Resources

ACCELERATORS_ENV = "MARINBUILD_ACCELERATORS"
_DEV = Path("/dev")


@dataclass(frozen=True)
class Accelerators:
    """This machine's accelerators: the name of each GPU (as nvidia-smi gives it, e.g.
    "NVIDIA H100 80GB HBM3"; "" where only the device file says there is one, which then
    counts as any kind), and the number of TPU chips."""

    gpus: tuple[str, ...] = ()
    tpu_chips: int = 0

    def describe(self) -> str:
        parts = []
        if self.gpus:
            kinds = sorted({name or "kind unknown" for name in self.gpus})
            parts.append(f"{len(self.gpus)} GPU{'s' if len(self.gpus) > 1 else ''} ({', '.join(kinds)})")
        if self.tpu_chips:
            parts.append(f"{self.tpu_chips} TPU chip{'s' if self.tpu_chips > 1 else ''}")
        return " and ".join(parts) or "no GPU or TPU"


def missing(resources: Resources, machine: Accelerators) -> str | None:
    """What of `resources`' accelerator this machine lacks, in words; None if it has it
    (or the step asks for none)."""
    wanted = resources.accelerator
    if not wanted:
        return None
    if resources.tpu is not None:
        return None if machine.tpu_chips else f"TPU {wanted}"
    count = max(1, resources.accelerator_count)
    matching = [name for name in machine.gpus if not name or wanted.lower() in name.lower()]
    if len(matching) >= count:
        return None
    return f"{count} {wanted} GPU{'s' if count > 1 else ''}"


@functools.cache
def local_accelerators() -> Accelerators:
    """This machine's accelerators (probed once per process)."""
    override = os.environ.get(ACCELERATORS_ENV)
    if override is not None:
        return parse(override)
    return Accelerators(_gpus(), _tpu_chips())


def parse(text: str) -> Accelerators:
    """`none`, or items `gpu:KIND[:COUNT]` and `tpu[:CHIPS]`, comma-separated."""
    gpus: list[str] = []
    chips = 0
    for item in filter(None, (part.strip() for part in text.split(","))):
        kind, _, rest = item.partition(":")
        if kind == "none":
            continue
        if kind == "gpu" and rest:
            name, _, count = rest.partition(":")
            gpus += [name] * _count(count or "1", text)
        elif kind == "tpu":
            chips += _count(rest or "1", text)
        else:
            raise WorkspaceError(
                f"{ACCELERATORS_ENV}={text!r}: '{item}' is not gpu:KIND[:COUNT] or tpu[:CHIPS]",
                hint=f"e.g. {ACCELERATORS_ENV}=gpu:H100:8, or none",
            )
    return Accelerators(tuple(gpus), chips)


def _count(text: str, whole: str) -> int:
    if not text.isdigit():
        raise WorkspaceError(f"{ACCELERATORS_ENV}={whole!r}: '{text}' is not a count")
    return int(text)


def _gpus() -> tuple[str, ...]:
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=True)
        except (OSError, subprocess.SubprocessError):
            pass
        else:  # "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)"
            return tuple(
                match.group(1) for line in done.stdout.splitlines() if (match := re.match(r"GPU \d+: (.+?) \(", line))
            )
    # No nvidia-smi: the driver's device files still say how many, not which kind.
    return tuple("" for _path in _DEV.glob("nvidia[0-9]*"))


def _tpu_chips() -> int:
    accel = list(_DEV.glob("accel[0-9]*"))
    if accel:
        return len(accel)
    vfio = _DEV / "vfio"
    return len([path for path in vfio.iterdir() if path.name.isdigit()]) if vfio.is_dir() else 0
