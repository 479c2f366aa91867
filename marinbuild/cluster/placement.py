"""A step's declared resources as Ray requests: what each host process asks for.

Ray names CPUs, GPUs and memory itself (`num_cpus`, `num_gpus`, `memory` in bytes) and
GPU kinds as an accelerator type ("H100" becomes the node resource
`accelerator_type:H100`). A TPU host offers `TPU` (its chips) and a resource named after
its slice; worker 0 of a slice also offers `TPU-<type>-head`, so a slice is taken by
reserving its head first and then one process per host with `{TPU: chips, <slice>: 1}`.
This module computes those requests without importing Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marinbuild.targets.rule import Resources

_GIB = 2**30


@dataclass(frozen=True)
class HostRequest:
    """What one host's process of a step asks Ray for."""

    num_cpus: float
    num_gpus: float = 0.0
    memory_bytes: int = 0
    accelerator_type: str | None = None
    resources: Mapping[str, float] = field(default_factory=dict)

    def options(self, extra_resources: Mapping[str, float] | None = None) -> dict[str, Any]:
        """Keyword arguments for Ray's `.options()` (`extra_resources`: e.g. a slice's name)."""
        options: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.memory_bytes:
            options["memory"] = self.memory_bytes
        if self.accelerator_type is not None:
            options["accelerator_type"] = self.accelerator_type
        custom = {**self.resources, **(extra_resources or {})}
        if custom:
            options["resources"] = custom
        return options

    def bundle(self, extra_resources: Mapping[str, float] | None = None) -> dict[str, float]:
        """The same request as a placement-group bundle (Ray's resource names)."""
        bundle = {"CPU": self.num_cpus, **self.resources, **(extra_resources or {})}
        if self.num_gpus:
            bundle["GPU"] = self.num_gpus
        if self.memory_bytes:
            bundle["memory"] = float(self.memory_bytes)
        if self.accelerator_type is not None:
            bundle[f"accelerator_type:{self.accelerator_type}"] = 0.001  # what Ray's accelerator_type option asks
        return {name: amount for name, amount in bundle.items() if amount}

    def describe(self) -> str:
        parts = [f"{self.num_cpus:g} CPU"]
        if self.num_gpus:
            parts.append(f"{self.num_gpus:g} GPU ({self.accelerator_type})")
        parts += [f"{amount:g} {name}" for name, amount in self.resources.items()]
        if self.memory_bytes:
            parts.append(f"{self.memory_bytes / _GIB:g} GiB memory")
        return ", ".join(parts)


@dataclass(frozen=True)
class Placement:
    """Where a step's processes go: `slices` groups of `hosts_per_slice` identical hosts.

    `slice_head` (TPU) is the resource reserved once per slice before its hosts are taken,
    so that every host of one group belongs to the same slice.
    """

    host: HostRequest
    hosts_per_slice: int = 1
    slices: int = 1
    slice_head: str | None = None

    @property
    def processes(self) -> int:
        return self.hosts_per_slice * self.slices

    def describe(self) -> str:
        hosts = f"{self.processes} host{'s' if self.processes > 1 else ''}"
        if self.slice_head is not None:
            hosts += (
                f" ({self.slices} slice{'s' if self.slices > 1 else ''} of {self.hosts_per_slice}, "
                f"each reserved by {self.slice_head})"
            )
        return f"{hosts}, each with {self.host.describe()}"


def placement(resources: Resources) -> Placement:
    memory = int(resources.memory_gb * _GIB)
    tpu = resources.tpu
    if tpu is not None:
        host = HostRequest(resources.cpu, 0.0, memory, tpu.ray_accelerator_type, {"TPU": float(tpu.chips_per_host)})
        return Placement(host, tpu.hosts, resources.slices, tpu.head_resource)
    if resources.accelerator is not None:
        host = HostRequest(resources.cpu, float(max(1, resources.accelerator_count)), memory, resources.accelerator)
        return Placement(host, resources.hosts)
    return Placement(HostRequest(resources.cpu, 0.0, memory), resources.hosts)
