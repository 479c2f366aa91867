"""The Ray executor: each step runs on a Ray cluster's hosts, placed by its resources.

The driver (the `marinbuild build` process) plans, holds each key's lease, records
attempts and publishes entries, exactly as with local execution. What it hands to Ray
is one attempt: one `StepHost` actor per host the step needs (one for most steps; a TPU
slice's hosts, or several GPU or CPU hosts, for a multi-host rule), placed by the
requests of `placement.py`. The hosts fetch inputs from the shared store and the first
one publishes the states the step keeps as it writes them and uploads the outputs under
the key; the driver streams their logs into the attempt's log, starts what reads a kept
state as soon as it is told of it, and commits the entry. A step whose host dies is reported as WorkerLost, which the
scheduler retries by the rule's policy; a step the cluster cannot place within the
placement timeout fails with the resources it asked for and those the cluster has.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marinbuild.actions.bookkeeping.machines import Machine
from marinbuild.actions.execution.executor import Dependencies, Executor, Placed, UnitInput, WorkerLost
from marinbuild.actions.execution.hermetic import StepSettings
from marinbuild.cluster.distributed import rendezvous
from marinbuild.cluster.placement import Placement, placement
from marinbuild.cluster.ray_host import StepHost, dependencies_to_json
from marinbuild.cluster.ray_units import run_unit, unit_request
from marinbuild.errors import ClusterError
from marinbuild.network import unreachable
from marinbuild.store import Store
from marinbuild.store.entries import Uploaded
from marinbuild.targets.context import Context, StepFailed
from marinbuild.targets.rule import Resources, Target

_POLL_S = 0.5
# Passed on to the cluster's workers when set here: where the store is, how leases age and syncs run.
_FORWARDED_ENV = (
    "STORAGE_EMULATOR_HOST",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "MARINBUILD_LEASE_TTL_S",
    "MARINBUILD_SYNC_S",
)


class RayExecutor(Executor):
    runs_here = False
    name = "ray"

    def __init__(
        self,
        store: Store,
        workspace: Path,
        address: str | None,
        placement_timeout_s: float,
        shared_scratch: str | None,
        steps: StepSettings,
    ):
        import ray

        self.store_spec = store.spec
        self.steps = steps  # each host applies them to its own environment
        self.workspace = workspace
        self.placement_timeout_s = placement_timeout_s
        # A remote store's scratch is a directory of each host; the hosts of one step must
        # share it (Levanter's checkpoints are written by every host), so a step on several
        # machines needs a directory they all mount. A local store's is the store's own.
        self.shared_scratch = shared_scratch
        self.scratch_is_shared = store.scratch_is_shared
        env = {name: os.environ[name] for name in _FORWARDED_ENV if name in os.environ}
        hint = "start one with 'ray start --head', or pass --ray-address HOST:PORT (or 'auto')"
        # Ray retries an address that does not answer for minutes; "auto" and None are
        # found (or started) on this machine.
        problem = unreachable(address, "ray", 6379) if address not in (None, "auto", "local") else None
        if problem is not None:
            raise ClusterError(f"cannot connect to the Ray cluster at {address}: {problem}", hint=hint)
        try:
            ray.init(
                address=address,
                log_to_driver=False,
                include_dashboard=False if address is None else None,
                runtime_env={"env_vars": env} if env else None,
                configure_logging=False,
            )
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise ClusterError(
                f"cannot connect to the Ray cluster at {address or 'a new local instance'}: {error}", hint=hint
            ) from None
        self._remote_host = ray.remote(StepHost)
        # Ray retries nothing itself: a unit whose worker died is the builder's to retry.
        self._remote_unit = ray.remote(num_cpus=1, max_retries=0)(run_unit)

    def close(self) -> None:
        import ray

        ray.shutdown()

    def run(
        self, target: Target, context: Context, dependencies: Dependencies, placed: Placed | None = None
    ) -> Uploaded | None:
        import ray

        where = placement(target.resources)
        hosts, reservations = self._place(where)
        try:
            addresses = ray.get([host.address.remote() for host in hosts])
            if placed is not None:
                placed([_machine(address["machine"], where.host.accelerator_type) for address in addresses])
            resumable = context.scratch is not None
            machines = {address["ip"] for address in addresses}
            if resumable and not self.scratch_is_shared and len(machines) > 1 and self.shared_scratch is None:
                raise StepFailed(
                    f"the step runs on {len(machines)} machines, whose scratch space (checkpoints) must be one "
                    "directory they all write: pass --ray-shared-scratch DIR (or set ray_shared_scratch), "
                    "a directory every node mounts (NFS, Filestore)"
                )
            distributed = self._rendezvous(hosts, addresses, where) if len(hosts) > 1 else [None]
            request = {
                "store": dataclasses.asdict(self.store_spec),
                "workspace": str(self.workspace),
                "impl": target.rule.impl_path,
                "label": context.label,
                "key": context.key,
                "attrs": context.attrs,
                "resumable": resumable,
                "shared_scratch": self.shared_scratch if not self.scratch_is_shared and len(hosts) > 1 else None,
                "reads_urls": target.rule.reads_urls,
                "action_env": [*self.steps.action_env, *target.rule.env],
                "sandbox": self.steps.sandbox,
                "dependencies": dependencies_to_json(dict(dependencies)),
                "keeps": target.attrs[target.rule.keeps_checkpoints] if target.rule.keeps_checkpoints else None,
                # The attempt whose host publishes the kept states: its staging directory
                # is named by its id (store/layout.py).
                "attempt": context.log_path.parent.name,
            }
            for rank, host in enumerate(hosts):
                host.start.remote({**request, "distributed": distributed[rank], "uploads": rank == 0})
            uploaded = self._follow(hosts, addresses, context)
            ray.get([host.discard_scratch.remote() for host in hosts])
            return uploaded
        finally:
            _release([*hosts, *reservations])

    # -- the units of a sharded step (actions/execution/shards.py) ----------------------------------

    def unit_slots(self, resources: Resources) -> int:
        """As many units at once as the cluster has CPUs (Ray queues what does not fit)."""
        import ray

        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def run_unit(
        self,
        target: Target,
        impl: str,
        context: Context,
        inputs: Mapping[str, UnitInput],
        placed: Placed | None = None,
    ) -> Uploaded | None:
        """One unit as a Ray task (cluster/ray_units.py), cancelled if the unit is stopped;
        `placed` is told the node the task ran on once it returns."""
        import ray

        action_env = [*self.steps.action_env, *target.rule.env]
        request = unit_request(self.store_spec, self.workspace, impl, context, inputs, action_env, self.steps.sandbox)
        task = self._remote_unit.remote(request)
        while not ray.wait([task], timeout=_POLL_S)[0]:
            if context.processes.stopped:
                ray.cancel(task, force=True)
                raise StepFailed("the unit was stopped; its Ray task was cancelled")
        try:
            report = ray.get(task)
        except ray.exceptions.RayTaskError as error:
            raise StepFailed(f"the unit's Ray task failed: {_first_line(error)}") from None
        except ray.exceptions.RayError as error:  # its worker or node died
            raise WorkerLost(f"the unit's Ray task was lost: {_first_line(error)}") from None
        if placed is not None and report.get("machine") is not None:
            placed([Machine.from_json(report["machine"])])
        with open(context.log_path, "a") as log:
            log.write(report["log"])
        if report["progress"] is not None:
            context.progress(*report["progress"])
        context.measure(**report["measured"])
        if "worker_lost" in report:
            raise WorkerLost(report["worker_lost"])
        if "error" in report:
            raise StepFailed(report["error"])
        return Uploaded.from_json(report["uploaded"])

    # -- placing a step ----------------------------------------------------------------

    def _place(self, where: Placement) -> tuple[list[Any], list[Any]]:
        """Reserve the step's hosts (a placement group: all of them or none, within the
        placement timeout), then start one actor in each. For TPU slices, an actor holding
        each slice's head resource first says which slice the hosts must come from."""
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        deadline = time.monotonic() + self.placement_timeout_s
        reservations: list[Any] = []
        extra: list[dict[str, float]] = [{}] * where.slices
        if where.slice_head is not None:
            reservations = [
                self._remote_host.options(num_cpus=0, resources={where.slice_head: 1}).remote()
                for _ in range(where.slices)
            ]
            names = self._wait([actor.slice_name.remote() for actor in reservations], deadline, where, reservations)
            extra = [{name: 1} for name in names]
        per_host = [extra[index] for index in range(where.slices) for _ in range(where.hosts_per_slice)]
        group = placement_group([where.host.bundle(resources) for resources in per_host], strategy="SPREAD")
        reservations.append(_PlacementGroup(group, remove_placement_group))
        self._wait([group.ready()], deadline, where, reservations)
        hosts = [
            self._remote_host.options(
                **where.host.options(resources),
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index),
            ).remote()
            for index, resources in enumerate(per_host)
        ]
        try:
            ray.get([host.address.remote() for host in hosts])
        except ray.exceptions.RayActorError as error:
            _release([*hosts, *reservations])
            raise StepFailed(
                f"a worker for the step could not start on the Ray cluster: {_first_line(error)}"
            ) from None
        return hosts, reservations

    def _wait(self, refs: list[Any], deadline: float, where: Placement, held: list[Any]) -> list[Any]:
        import ray

        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=max(0.0, deadline - time.monotonic()))
        if len(ready) < len(refs):
            _release(held)
            raise StepFailed(
                f"the Ray cluster did not place the step within {self.placement_timeout_s:g} s: "
                f"it asks for {where.describe()}; the cluster has {_describe(ray.cluster_resources())} in all, "
                f"{_describe(ray.available_resources())} free "
                "(a larger cluster, an autoscaler, or a longer --ray-placement-timeout)"
            )
        try:
            return ray.get(refs)
        except ray.exceptions.RayActorError as error:
            _release(held)
            raise StepFailed(
                f"a worker for the step could not start on the Ray cluster: {_first_line(error)}"
            ) from None

    def _rendezvous(self, hosts: list[Any], addresses: list[dict[str, Any]], where: Placement) -> list[dict[str, Any]]:
        """Where the hosts of a multi-host step meet: JAX distributed's coordinator on host 0
        (and Megascale's, across slices)."""
        import ray

        port = ray.get(hosts[0].free_port.remote())
        return rendezvous([address["ip"] for address in addresses], port, where.hosts_per_slice)

    # -- following a running step --------------------------------------------------------

    def _follow(self, hosts: list[Any], addresses: list[dict[str, Any]], context: Context) -> Uploaded | None:
        import ray

        outcomes: list[dict[str, Any] | None] = [None] * len(hosts)
        with open(context.log_path, "a") as log:
            places = ", ".join(f"{address['host']} ({address['ip']}, pid {address['pid']})" for address in addresses)
            log.write(f"marinbuild: running on the Ray cluster: {places}\n")
            while any(outcome is None for outcome in outcomes):
                if context.processes.stopped:
                    raise StepFailed("the step was stopped; its workers were killed")
                for rank, host in enumerate(hosts):
                    if outcomes[rank] is not None:
                        continue
                    try:
                        report = ray.get(host.poll.remote())
                    except ray.exceptions.RayActorError as error:
                        raise WorkerLost(f"{_name(rank, addresses, len(hosts))} died: {_first_line(error)}") from None
                    if report["log"]:
                        prefix = f"[host {rank}] " if len(hosts) > 1 else ""
                        log.write("".join(prefix + line for line in report["log"].splitlines(keepends=True)))
                        log.flush()
                    if report["progress"] is not None and rank == 0:
                        context.progress(*report["progress"])
                    for kept in report["kept"]:  # published by the host: the driver finds its entry
                        if "error" in kept:
                            log.write(f"marinbuild: could not publish the state at step {kept['step']} yet: ")
                            log.write(f"{kept['error']}\n")
                        else:
                            context.publish_checkpoint(kept["step"], Path(kept["directory"]))
                    outcome = report["outcome"]
                    if outcome is not None and rank == 0:
                        context.measure(**outcome["measured"])
                    if outcome is not None and "worker_lost" in outcome:
                        raise WorkerLost(f"{_name(rank, addresses, len(hosts))}: {outcome['worker_lost']}")
                    if outcome is not None and "error" in outcome:
                        raise StepFailed(_failure(outcome["error"], rank, addresses, len(hosts)))
                    outcomes[rank] = outcome
                if any(outcome is None for outcome in outcomes):
                    time.sleep(_POLL_S)
        first = outcomes[0]
        assert first is not None
        return Uploaded.from_json(first["uploaded"])


class _PlacementGroup:
    """A reserved placement group, released like the actors next to it."""

    def __init__(self, group: Any, remove: Any):
        self.group = group
        self.remove = remove


def _release(held: list[Any]) -> None:
    """Kill the step's actors and give back its reservations."""
    import ray

    for item in held:
        if isinstance(item, _PlacementGroup):
            item.remove(item.group)
        else:
            ray.kill(item)


def _name(rank: int, addresses: list[dict[str, Any]], count: int) -> str:
    where = f"{addresses[rank]['host']} ({addresses[rank]['ip']})"
    return f"host {rank} of {count}, {where}" if count > 1 else f"the worker on {where}"


def _failure(error: str, rank: int, addresses: list[dict[str, Any]], count: int) -> str:
    if error.startswith(("ModuleNotFoundError", "ImportError")):
        host = addresses[rank]["host"]
        error += f" — on {host}: the cluster's nodes need the step's Python dependencies (the driver's environment)"
    return f"{_name(rank, addresses, count)}: {error}" if count > 1 else error


def _machine(data: dict[str, Any], asked: str | None) -> Machine:
    """A host of the step, its accelerator kind, where Ray did not label its node, the kind
    the step asked for (Ray placed it on a node that has it)."""
    machine = Machine.from_json(data)
    if machine.accelerator_type is None and machine.accelerators and asked is not None:
        return dataclasses.replace(machine, accelerator_type=asked)
    return machine


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _describe(resources: dict[str, float]) -> str:
    shown = {
        name: amount for name, amount in resources.items() if not name.startswith(("node:", "object_store_memory"))
    }
    parts = [
        f"{amount / 2**30:.3g} GiB memory" if name == "memory" else f"{amount:g} {name}"
        for name, amount in sorted(shown.items())
    ]
    return "{" + ", ".join(parts) + "}"
