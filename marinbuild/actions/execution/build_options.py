"""How one build runs: the command's options, and the hooks the session lends execution.

Every part of a build reads these (planning, copying from mirrors, running steps, the
scheduler), so they live apart from all of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from marinbuild.actions.execution.hermetic import StepSettings
from marinbuild.store import Outputs
from marinbuild.targets.compute import Utilisation
from marinbuild.targets.rule import Resources, Target


@dataclass(frozen=True)
class Egress:
    """What a build may copy from mirrors in other regions (store/mirrors.py): `budget_gb`
    of cross-region bytes, or anything with `allowed` (`--allow-egress`). `setting` says
    where the budget is set, for the error that stops a build past it."""

    budget_gb: float = 10.0
    allowed: bool = False
    setting: str = "egress_budget_gb"


@dataclass(frozen=True)
class BuildOptions:
    jobs: int
    keep_going: bool = False
    dry_run: bool = False
    strict_code: bool = False  # the rule's source enters every key (not only its version)
    explain: bool = False  # say why each step runs (a diff against the target's nearest entry)
    capacity: Resources = field(default_factory=lambda: machine_capacity())
    executor: str = "local"  # or "ray": see marinbuild/cluster/ray_executor.py
    ray_address: str | None = None
    ray_placement_timeout_s: float = 600.0
    ray_shared_scratch: str | None = None  # a directory every node mounts, for multi-host scratch
    steps: StepSettings = StepSettings()  # environment, sandbox, default timeout (hermetic.py)
    # Look keys missing from the store up in its mirrors, and copy what they hold within
    # this budget; None: mirrors are not asked (commands that only read the store).
    egress: Egress | None = None
    # The utilisation an estimate of a training's accelerator-hours assumes (targets/compute.py),
    # recorded with each attempt; and the most accelerator-hours the stale steps may add up to.
    utilisation: Utilisation = None
    max_accelerator_hours: float | None = None


def machine_capacity() -> Resources:
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return Resources(cpu=float(os.cpu_count() or 1), memory_gb=memory_gb)


class HolderLog(Protocol):
    """Follows the log of the builder holding a key this build waits for."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Hooks:
    """What the layers above execution lend it, installed by the session: execution never
    imports them (provenance reads the store's history; execution only writes it)."""

    # One line: why a target whose key has no entry runs (`--explain`).
    explain_miss: Callable[[Target, dict[str, Any]], str] | None = None
    # Given a key and where to print lines: the log of whoever holds its lease.
    follow_holder: Callable[[str, Callable[[str], None]], HolderLog] | None = None
    # The pinned contents of an external artifact (`external`), checked against what its
    # URL holds now; raises a MarinbuildError (exit 2) if they changed or were never pinned.
    resolve_pinned: Callable[[Target], Outputs] | None = None
