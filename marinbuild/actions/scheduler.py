"""Execution: run the stale steps of a graph, in parallel, within the machine's resources.

One coordinator thread walks the graph in dependency order. A target's key can only be
computed once its dependencies' output digests are known (early cutoff), so keys are
computed as dependencies resolve: a hit resolves the target at once, a miss queues it.
Queued steps start while they fit the machine (`--jobs`, declared CPUs and memory);
each runs on a worker thread that takes the key's lease, re-checks the cache, runs the
rule, and publishes. A failure skips everything downstream of it; without
`--keep-going` nothing new starts after the first failure.

A target that reads another's kept state (`eval_lm(model = ":run", step = 2000)`) waits
for that state, not for the whole step: it is resolved from its own entry as soon as the
running step publishes it (`ctx.publish_checkpoint`; a worker thread announces it and
wakes the coordinator), or found in the store, where the step that keeps it publishes
it at the latest when it ends (actions/kept_states.py).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from marinbuild.actions import keys
from marinbuild.actions.attempt import RunOutcome, StepRun
from marinbuild.actions.build_provenance import Provenance
from marinbuild.actions.executor import Dependencies, Executor, LocalExecutor, input_files
from marinbuild.actions.graph import Graph
from marinbuild.actions.hermetic import StepSettings, recorded_environment, step_environment
from marinbuild.actions.kept_states import kept_in_output, kept_keys, publish_kept_state, settler
from marinbuild.actions.results import BuildResult, NullReporter, Reporter, Status, TargetResult
from marinbuild.actions.resume import resume_point
from marinbuild.errors import EgressOverBudget, GraphError, OutputDamaged, StoreReadOnly, StoreUnavailable
from marinbuild.store import (
    ActionCache,
    Attempt,
    AttemptStatus,
    Lease,
    Lookup,
    Outputs,
    reporting_transfers,
)
from marinbuild.store.live_sync import syncing
from marinbuild.store.mirrors import MirrorHit, format_bytes
from marinbuild.targets.context import StepFailed
from marinbuild.targets.rule import Resources, RetryPolicy, Rule, Target, checkpoint_name


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
    steps: StepSettings = StepSettings()  # environment, sandbox, default timeout (actions/hermetic.py)
    # Look keys missing from the store up in its mirrors, and copy what they hold within
    # this budget; None: mirrors are not asked (commands that only read the store).
    egress: Egress | None = None


def machine_capacity() -> Resources:
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return Resources(cpu=float(os.cpu_count() or 1), memory_gb=memory_gb)


@dataclass(frozen=True)
class _Planned:
    """A target whose key is known."""

    target: Target
    key: str
    recipe: dict[str, Any]
    why: str | None = None  # why it runs, with --explain


@dataclass(frozen=True)
class _Outcome:
    outputs: Outputs | None
    duration_s: float
    error: str | None = None
    log: Path | None = None
    ran: bool = True  # False when another builder published it while we waited
    attempt: str | None = None  # the id of the attempt that ran it
    failure: str | None = None  # "worker_lost" or "failed": which retry budget a failure uses


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


class Scheduler:
    def __init__(
        self,
        graph: Graph,
        cache: ActionCache,
        salt: str,
        options: BuildOptions,
        reporter: Reporter,
        workspace: Path,
        executor: Executor | None = None,
        hooks: Hooks = Hooks(),
    ):
        self.graph = graph
        self.executor = executor or LocalExecutor()
        self.hooks = hooks
        self.cache = cache
        self.salt = salt
        self.options = options
        self.reporter = reporter
        self.workspace = workspace
        self.provenance = Provenance(workspace)
        self.result = BuildResult(requested=graph.requested)
        self._outputs: dict[str, Outputs] = {}
        self._tokens: dict[str, str] = {}
        # Who waits for what: rule targets and kept states (graph.checkpoints) alike.
        self._dependents: dict[str, list[str]] = {name: [] for name in (*graph.targets, *graph.checkpoints)}
        self._waiting: dict[str, int] = {}
        for label in graph.order:
            inputs = dict.fromkeys(graph.inputs(label))
            self._waiting[label] = len(inputs)
            for dep in inputs:
                self._dependents[dep].append(label)
        self._kept: dict[str, list[str]] = {}  # a target -> the names of its kept states the graph reads
        for name, checkpoint in graph.checkpoints.items():
            self._kept.setdefault(checkpoint.of, []).append(name)
        self._keys: dict[str, str] = {}  # the key of each target whose key is known
        # Kept states published by running steps, for the coordinator; `_wake` ends its wait.
        self._announced: list[tuple[str, Outputs]] = []
        self._wake: Future[None] = Future()
        self._wake_lock = threading.Lock()
        self._ready: deque[str] = deque()  # targets whose inputs are all known
        self._requested = set(graph.requested)
        self._interrupted = False  # set on Ctrl-C: running steps are stopped and record `cancelled`
        # Set when the store refuses writes: cached targets are served, a step to run is an error.
        self.read_only: StoreReadOnly | None = None
        self._runs: set[StepRun] = set()  # the steps running now
        self._runs_lock = threading.Lock()
        self._copies: list[tuple[str, MirrorHit]] = []  # found in mirrors, not yet copied
        self.foreseen: dict[str, MirrorHit] = {}  # every target found in a mirror (a dry run's are foreseen)
        self._looked_ahead = False  # whether the copies this build can foresee were checked
        self._egress_bytes = 0  # copied across regions so far

    # -- the coordinator loop ------------------------------------------------------------

    def run(self) -> BuildResult:
        started = time.monotonic()
        self.reporter.build_started(len(self.graph.targets))
        self._hash_sources()
        self.cache.list_entries(len(self.graph.targets))
        ready = self._ready
        ready.extend(label for label in self.graph.order if self._waiting[label] == 0)
        queued: deque[_Planned] = deque()
        running: dict[Future[_Outcome], _Planned] = {}
        used = Resources(cpu=0.0, memory_gb=0.0)
        stopping = False
        with ThreadPoolExecutor(max_workers=self.options.jobs, thread_name_prefix="step") as pool:
            try:
                while ready or (queued and not stopping) or running:
                    self._take_announced()
                    while ready:
                        queued.extend(self._plan_ready())
                        if self._copies:
                            self._copy_from_mirrors()  # resolves them: what follows is ready
                    while queued and not stopping and len(running) < self.options.jobs:
                        planned = self._take_fitting(queued, used, bool(running))
                        if planned is None:
                            break
                        used = _add(used, planned.target.resources, +1)
                        self.reporter.step_started(str(planned.target.label))
                        running[pool.submit(self._execute, planned)] = planned
                    if not running:
                        continue
                    try:
                        done, _ = wait([*running, self._wake], return_when=FIRST_COMPLETED)
                    except KeyboardInterrupt:
                        self._stop_all()  # before the pool waits for the running steps to end
                        raise
                    self._take_announced()  # published before the step that kept them ended
                    for future in done:
                        if future not in running:
                            continue  # the wake-up: a running step published a kept state
                        planned = running.pop(future)
                        used = _add(used, planned.target.resources, -1)
                        if not self._finish(planned, future.result()) and not self.options.keep_going:
                            stopping = True
            except (StoreUnavailable, EgressOverBudget):
                # Every step needs the store: stop the running ones (their processes are
                # killed) before the pool waits for them, then stop the build (exit 2).
                self._stop_all()
                raise
        for label in self.graph.order:
            if label not in self.result.results:
                self._record(
                    TargetResult(label, Status.SKIPPED, reason="not started: the build stopped after a failure")
                )
        self.cache.stat_cache.save()
        self.cache.memo.save()
        self.result.results = {label: self.result.results[label] for label in self.graph.order}
        self.result.elapsed_s = time.monotonic() - started
        self._warn_code_drift()
        self.reporter.build_finished(self.result)
        return self.result

    def _hash_sources(self) -> None:
        for label, source in self.graph.sources.items():
            digest, _size = self.cache.stat_cache.digest(source.path)
            self._tokens[label] = keys.source_token(source.label.name, digest)

    def _external(self, label: str) -> str | None:
        target = self.graph.targets[label]
        if target.rule.external_inputs is None:
            return None
        files = target.rule.external_inputs(target.attrs)
        return keys.external_digest(files, lambda path: self.cache.stat_cache.digest(path)[0])

    def _plan_ready(self) -> list[_Planned]:
        """Plan every ready target, looking their keys up together (in parallel on a remote store)."""
        ready = list(self._ready)
        self._ready.clear()  # a pinned target resolved here makes its dependents ready: next round
        labels = [label for label in ready if not self._resolved_pinned(label)]
        action_keys = [keys.target_key(*self._key_ingredients(label)) for label in labels]
        lookups = self.cache.lookup_many(action_keys)
        in_mirrors = self._find_in_mirrors(action_keys, lookups)
        planned = (
            self._plan(label, key, lookup, in_mirrors.get(key))
            for label, key, lookup in zip(labels, action_keys, lookups)
        )
        return [item for item in planned if item is not None]

    def _key_ingredients(self, label: str) -> tuple[Target, Callable[[str], str], str, str | None, str | None]:
        """What a target's key and recipe are made of, once its inputs are known."""
        target = self.graph.targets[label]
        code = keys.code_digest(target.rule) if self.options.strict_code else None
        return target, self._tokens.__getitem__, self.salt, self._external(label), code

    def recipe(self, label: str) -> dict[str, Any] | None:
        """The recipe of a target whose key this build knows (None for the others). Made
        again when asked: a build needs recipes only for the steps it runs, and `explain`."""
        return self._recipe(label) if label in self._keys else None

    def _recipe(self, label: str) -> dict[str, Any]:
        return keys.recipe(*self._key_ingredients(label))

    def _find_in_mirrors(self, action_keys: list[str], lookups: list[Lookup]) -> dict[str, MirrorHit]:
        """The keys the store lacks (no entry at all) that a mirror holds, verified there;
        a build only, and only after the local look-ups, so a no-op asks no mirror."""
        mirrors = self.cache.mirrors
        if self.options.egress is None or mirrors is None:
            return {}
        missing = [
            key for key, lookup in zip(action_keys, lookups) if lookup.outputs is None and lookup.problem is None
        ]
        if not missing:
            return {}
        hits, problems = mirrors.find(missing)
        for problem in problems:
            self.reporter.warning(f"{problem}; not copied: it is built here")
        return hits

    def _plan(self, label: str, key: str, lookup: Lookup, mirrored: MirrorHit | None = None) -> _Planned | None:
        """Resolve a hit at once (one in a mirror is copied before any step that follows
        runs); return a miss to be run (or shown, when dry)."""
        target = self.graph.targets[label]
        self._keys[label] = key
        if mirrored is not None and self.cache.mirrors is not None:
            self.foreseen[label] = mirrored
            if not self.options.dry_run:
                self._copies.append((label, mirrored))  # resolved once copied
                return None
            reason = f"in {mirrored.describe()}: a build copies it"
            self._record(TargetResult(label, Status.WOULD_COPY, key, reason=reason))
            self._resolve(label, self.cache.mirrors.outputs(mirrored))
            return None
        if lookup.outputs is not None:
            built_with = lookup.outputs.rule_code
            code_changed = built_with is not None and built_with != keys.code_digest(target.rule)
            self._record(TargetResult(label, Status.CACHED, key, lookup.outputs.directory, code_changed=code_changed))
            self._resolve(label, lookup.outputs)
            return None
        if lookup.problem is not None:
            self.reporter.warning(f"{label}: {lookup.problem}; rebuilding it")
        for name in self._kept.get(label, ()):  # kept states a build (maybe one that failed) published
            kept = self.cache.lookup(self._checkpoint_key(name)).outputs
            if kept is not None:
                self._resolve(name, kept)
        explain = self.hooks.explain_miss if self.options.explain else None
        recipe = self._recipe(label)
        reason = lookup.problem or (explain(target, recipe) if explain else "no cached output for its key")
        if self.read_only is not None and not self.options.dry_run:
            raise StoreReadOnly(
                f"{label} must run ({reason}), but {self.read_only.message}: nothing could be published",
                hint=self.read_only.hint,
            )
        if self.options.dry_run:
            self._record(TargetResult(label, Status.WOULD_RUN, key, reason=reason))
            for dependent in self._downstream(label):
                self._record(TargetResult(dependent, Status.PENDING, reason=f"its key needs the output of {label}"))
            return None
        return _Planned(target, key, recipe, reason if self.options.explain else None)

    def _copy_from_mirrors(self) -> None:
        """Copy what the last round of planning found in mirrors, then resolve it, before
        any step that may read it starts. The first time, every copy the build can foresee
        (a dry run of the graph, mirror hits resolved in memory: what lies downstream of
        them) is checked against the egress budget at once, so a build past it copies
        nothing; each round is checked again, for copies found downstream of steps that ran.
        Past the budget the build stops (exit 2) listing the copies, unless egress is allowed."""
        pending, self._copies = self._copies, []
        egress, mirrors = self.options.egress, self.cache.mirrors
        assert egress is not None and mirrors is not None
        budget = egress.budget_gb * 1e9
        if not egress.allowed and not self._looked_ahead:
            self._looked_ahead = True
            ahead = Scheduler(
                self.graph,
                self.cache,
                self.salt,
                dataclasses.replace(self.options, dry_run=True, jobs=1),
                NullReporter(),
                self.workspace,
                hooks=self.hooks,
            )
            ahead.run()
            foreseen = sum(hit.bytes for hit in ahead.foreseen.values() if hit.crosses_regions)
            if foreseen > budget:
                raise self._over_budget(list(ahead.foreseen.items()), foreseen, egress)
        crossing = sum(hit.bytes for _label, hit in pending if hit.crosses_regions)
        if crossing and not egress.allowed and self._egress_bytes + crossing > budget:
            raise self._over_budget(pending, crossing, egress)

        def copy(label: str, hit: MirrorHit) -> Outputs:
            with reporting_transfers(functools.partial(self.reporter.step_progress, label)):
                return mirrors.copy(hit)

        with ThreadPoolExecutor(max_workers=min(len(pending), _PARALLEL_COPIES), thread_name_prefix="copy") as pool:
            copied = list(pool.map(lambda item: copy(*item), pending))
        for (label, hit), outputs in zip(pending, copied):
            self._egress_bytes += hit.bytes if hit.crosses_regions else 0
            reason = f"copied from {hit.describe()}"
            self._record(TargetResult(label, Status.CACHED, hit.key, outputs.directory, reason=reason))
            self._resolve(label, outputs)

    def _over_budget(self, found: list[tuple[str, MirrorHit]], crossing: int, egress: Egress) -> EgressOverBudget:
        """The error that stops a build past its egress budget: every copy across regions
        it would make, with its size, at the BUILD line of the first."""
        crossing_hits = [(label, hit) for label, hit in found if hit.crosses_regions]
        lines = [f"{label} ({hit.key[:12]}): {hit.describe()}" for label, hit in crossing_hits[:20]]
        if len(crossing_hits) > 20:
            lines.append(f"... and {len(crossing_hits) - 20} more")
        already = f", after {format_bytes(self._egress_bytes)} copied" if self._egress_bytes else ""
        entries = sum(hit.entries for _label, hit in crossing_hits)  # kept states are copied with their keeper
        return EgressOverBudget(
            f"copying {entries} entries from other regions would move {format_bytes(crossing)}{already}, "
            f"over this build's egress budget of {format_bytes(egress.budget_gb * 1e9)}; none of them was copied:\n    "
            + "\n    ".join(lines),
            location=self.graph.targets[crossing_hits[0][0]].location,
            hint=f"pass --allow-egress to copy them anyway, or raise {egress.setting}",
        )

    def _resolved_pinned(self, label: str) -> bool:
        """Resolve an external artifact at once (it is pinned, never built); False for others."""
        target = self.graph.targets[label]
        if not target.rule.pinned:
            return False
        if self.hooks.resolve_pinned is None:
            raise GraphError(f"{label} is an external artifact, which this command cannot resolve")
        outputs = self.hooks.resolve_pinned(target)
        self._record(TargetResult(label, Status.PINNED, outputs.key, outputs.directory))
        self._resolve(label, outputs)
        return True

    def _take_fitting(self, queued: deque[_Planned], used: Resources, busy: bool) -> _Planned | None:
        """The first queued step that fits next to the running ones (anything fits an idle machine)."""
        capacity = self.options.capacity
        for index, planned in enumerate(queued):
            need = planned.target.resources
            fits = used.cpu + need.cpu <= capacity.cpu + 1e-9 and used.memory_gb + need.memory_gb <= capacity.memory_gb
            if fits or not busy:
                del queued[index]
                return planned
        return None

    def _finish(self, planned: _Planned, outcome: _Outcome) -> bool:
        label = str(planned.target.label)
        if outcome.outputs is None:
            self._record(
                TargetResult(
                    label,
                    Status.FAILED,
                    planned.key,
                    None,
                    outcome.duration_s,
                    outcome.error,
                    outcome.log,
                    attempt=outcome.attempt,
                )
            )
            for dependent in self._downstream(label):
                self._record(TargetResult(dependent, Status.SKIPPED, reason=f"dependency {label} failed"))
            return False
        status = Status.BUILT if outcome.ran else Status.CACHED
        why = planned.why if outcome.ran else None
        self._record(
            TargetResult(
                label, status, planned.key, outcome.outputs.directory, outcome.duration_s, why, attempt=outcome.attempt
            )
        )
        self._resolve(label, outcome.outputs)
        return True

    def _resolve(self, label: str, outputs: Outputs) -> None:
        """A target's (or a kept state's) outputs are known: dependents whose inputs are now
        all known become ready. Once a target's outputs are known, so are its kept states."""
        if label in self._outputs:
            return  # a kept state announced by its running step and found again since
        self._outputs[label] = outputs
        self._tokens[label] = keys.output_token(outputs.tree_digest)
        for dependent in self._dependents[label]:
            self._waiting[dependent] -= 1
            if self._waiting[dependent] == 0:
                self._ready.append(dependent)
        for name in self._kept.get(label, ()):
            if name not in self._outputs:
                self._resolve_from_output(name, outputs)

    # -- kept states ----------------------------------------------------------------------

    def _checkpoint_key(self, name: str) -> str:
        checkpoint = self.graph.checkpoints[name]
        return keys.checkpoint_key(self._keys[checkpoint.of], checkpoint.step)

    def _resolve_from_output(self, name: str, outputs: Outputs) -> None:
        """A kept state of a target whose output is known: its entry (the target's entry is
        a hit only with it), the one a dry run would copy with the target from a mirror, or
        one published from an output made before kept states left it (kept_states.py)."""
        checkpoint = self.graph.checkpoints[name]
        key = self._checkpoint_key(name)
        found = self.cache.lookup(key)
        kept = (
            found.outputs
            or self._foreseen_kept(checkpoint.of, key)
            or kept_in_output(
                self.cache, checkpoint.of, checkpoint.step, outputs, self.provenance.invocation, self.options.dry_run
            )
        )
        if kept is None:
            why = (
                f"{checkpoint.of} has no usable checkpoint at step {checkpoint.step} "
                f"({found.problem or 'its entry is missing'}); build again to rebuild it"
            )
            for dependent in self._downstream(name):
                self._record(TargetResult(dependent, Status.SKIPPED, reason=why))
            return
        self._resolve(name, kept)

    def _foreseen_kept(self, of: str, key: str) -> Outputs | None:
        """In a dry run, the kept state `key` that a build would copy from a mirror with
        the target `of` keeping it (store/mirrors.py)."""
        hit = self.foreseen.get(of) if self.options.dry_run else None
        state = hit.kept_state(key) if hit is not None else None
        return self.cache.mirrors.outputs(state) if state is not None and self.cache.mirrors is not None else None

    def _kept_by_running(self, planned: _Planned, attempt: Attempt, step: int, files: Path) -> None:
        """`ctx.publish_checkpoint` of a running step (on its worker thread): publish the
        state, and wake the coordinator if targets of this build read it."""
        label = str(planned.target.label)
        kept = planned.target.attrs.get(planned.target.rule.keeps_checkpoints or "") or []
        if step not in kept:
            self.reporter.warning(f"{label}: published a checkpoint at step {step}, which it does not keep; ignored")
            return
        try:
            outputs = publish_kept_state(
                self.cache, label, planned.key, step, files, attempt.attempt_id, self.provenance.invocation
            )
        except Exception as error:  # noqa: BLE001 - it is published from the output when the step ends
            self.reporter.warning(f"{label}: could not publish its checkpoint at step {step} yet: {error}")
            return
        self.reporter.step_log(label, f"published its checkpoint at step {step} ({keys.short(outputs.key)})")
        name = checkpoint_name(label, step)
        if name in self._dependents:
            with self._wake_lock:
                self._announced.append((name, outputs))
                if not self._wake.done():
                    self._wake.set_result(None)

    def _take_announced(self) -> None:
        """Resolve the kept states running steps announced (on the coordinator's thread)."""
        with self._wake_lock:
            announced, self._announced = self._announced, []
            if self._wake.done():
                self._wake = Future()
        for name, outputs in announced:
            self._resolve(name, outputs)

    def _downstream(self, label: str) -> list[str]:
        """The targets that depend on `label` and have no result yet, dependencies first (as
        a dry run or a failure lists them); through the kept states of a target not yet
        resolved, whose readers wait for it too."""
        seen: set[str] = set()
        stack = list(self._dependents[label])
        stack += self._readers_waiting(label)
        while stack:
            current = stack.pop()
            if current not in seen and current not in self.result.results:
                seen.add(current)
                stack.extend(self._dependents[current])
                stack += self._readers_waiting(current)
        return sorted(seen, key=self._position.__getitem__)

    def _readers_waiting(self, label: str) -> list[str]:
        """The targets reading a kept state of `label` that is not known yet."""
        return [
            reader
            for name in self._kept.get(label, ())
            if name not in self._outputs
            for reader in self._dependents[name]
        ]

    @functools.cached_property
    def _position(self) -> dict[str, int]:
        return {label: index for index, label in enumerate(self.graph.order)}

    def _record(self, result: TargetResult) -> None:
        target = self.graph.targets[result.label]
        if result.output is not None and result.label in self._requested:
            headline = target.rule.headline
            if headline is not None:
                result = dataclasses.replace(result, headline=headline(Path(result.output)))
        if target.attrs["description"]:
            result = dataclasses.replace(result, description=target.attrs["description"])
        self.result.results[result.label] = result
        self.reporter.step_finished(result)

    # -- one step, on a worker thread -----------------------------------------------------

    def _execute(self, planned: _Planned) -> _Outcome:
        label = str(planned.target.label)
        started = time.monotonic()
        follow = self.hooks.follow_holder
        holder_log = follow(planned.key, lambda line: self.reporter.step_log(label, line)) if follow else None

        def waiting(message: str) -> None:
            self.reporter.warning(f"{label}: {message}")
            if holder_log is not None:
                holder_log.start()

        try:
            with self.cache.lease(planned.key, waiting) as lease:
                if holder_log is not None:
                    holder_log.stop()
                again = self.cache.lookup(planned.key)
                if again.outputs is not None:
                    return _Outcome(again.outputs, time.monotonic() - started, ran=False)
                tries = _Tries(planned.target.rule.retry)
                while True:
                    progress = functools.partial(self.reporter.step_progress, label)
                    with reporting_transfers(progress):
                        outcome = self._attempt(planned, lease, tries.number, started)
                    if not tries.again(outcome.failure):
                        return outcome
                    self.reporter.warning(f"{label}: attempt {tries.number - 1} failed ({outcome.error}); trying again")
        except StoreUnavailable:
            raise  # the store is gone for every step: the coordinator stops the build
        except Exception:  # noqa: BLE001 - a bug or an I/O error must fail one step, not hang the build
            return _Outcome(None, time.monotonic() - started, f"internal error:\n{traceback.format_exc()}")
        finally:
            if holder_log is not None:
                holder_log.stop()

    def _attempt_info(self, planned: _Planned, number: int) -> dict[str, Any]:
        rule = planned.target.rule
        return {
            "attempt_number": number,
            "rule": rule.name,
            "rule_version": rule.version,
            "started": _now(),
            "invocation": self.provenance.invocation_id,
            "rule_code": keys.code_digest(rule),
            # What `rerun` needs to rebuild the recipe from the store alone: every attribute
            # with its labels, and what each label stood for (dependencies by key).
            "attrs": dict(planned.target.attrs),
            "inputs": self._input_records(planned.target),
            "environment": recorded_environment(self._environment(rule)),
            **({"sandbox": True} if self.options.steps.sandbox else {}),
            **self.provenance.invocation,
            "packages": self.provenance.packages(rule.packages),
        }

    def _input_records(self, target: Target) -> dict[str, dict[str, str]]:
        records: dict[str, dict[str, str]] = {}
        for label in self.graph.deps[str(target.label)]:
            if label in self.graph.sources:
                records[label] = {"source": self.cache.stat_cache.digest(self.graph.sources[label].path)[0]}
            else:
                records[label] = {"key": self._outputs[label].key, "tree_digest": self._outputs[label].tree_digest}
                checkpoint = self.graph.checkpoints.get(label)
                if checkpoint is not None:  # what `rerun` needs to find it again
                    records[label] |= {"checkpoint_of": self._keys[checkpoint.of], "step": checkpoint.step}
        return records

    def _attempt(self, planned: _Planned, lease: Lease, number: int, started: float) -> _Outcome:
        """One attempt under the key's lease: recorded, run, then published or not."""
        label, key = str(planned.target.label), planned.key
        attempt = self.cache.start_attempt(key, label, self._attempt_info(planned, number))
        scratch = self._scratch(planned)
        runs_here = self.executor.runs_here
        mirror = None if scratch is None else self.cache.store.scratch_mirror(key, scratch)
        if mirror is not None and runs_here:  # a remote executor's hosts restore it themselves
            restored = mirror.restore()
            if restored:
                self.reporter.warning(
                    f"{label}: resuming from {restored} checkpoint files left in the store by an earlier attempt"
                )
        point = resume_point(self.cache.store, planned.target.rule, key) if scratch is not None else None
        if point is not None:
            self.reporter.warning(f"resuming {label} from {point}")
        for name, record in attempt.record["inputs"].items():
            if "source" in record:
                self.cache.put_blob(attempt, self.graph.sources[name].path, record["source"])
        outcome = self._run(planned, attempt, lease, scratch, mirror if runs_here else None)
        duration = time.monotonic() - started
        log = self.cache.records.log_file(key, attempt.attempt_id)
        if not outcome.succeeded:
            details = outcome.record()
            self.cache.finish_attempt(attempt, outcome.status, finished=_now(), duration_s=duration, **details)
            return _Outcome(None, duration, outcome.error, log, attempt=attempt.attempt_id, failure=outcome.retry_as)
        measured = {"measured": outcome.measured} if outcome.measured else {}
        provenance = {**attempt.record, "finished": _now(), "duration_s": round(duration, 3), **measured}
        if planned.target.rule.keeps_checkpoints:  # its entry names them: `cache gc` keeps them with it
            provenance["checkpoints"] = kept_keys(key, planned.target.attrs[planned.target.rule.keeps_checkpoints])
        provenance.pop("status", None)
        published = outcome.uploaded or outcome.manifest
        assert published is not None
        outputs = self.cache.publish(attempt, planned.recipe, provenance, published)
        self.cache.finish_attempt(attempt, AttemptStatus.SUCCEEDED, finished=_now(), duration_s=duration, **measured)
        if scratch is not None:  # published: the checkpoints are of no further use
            if mirror is not None:
                mirror.discard()
            shutil.rmtree(scratch, ignore_errors=True)
        return _Outcome(outputs, duration, log=log, attempt=attempt.attempt_id)

    def _run(
        self,
        planned: _Planned,
        attempt: Attempt,
        lease: Lease,
        scratch: Path | None,
        mirror: Any,
        publishes: bool = True,
    ) -> RunOutcome:
        """Run a step through its `StepRun`, stopped if the lease is lost or the build
        interrupted; `publishes`: the states it keeps are published as it reaches them."""
        target, label = planned.target, str(planned.target.label)
        dependencies = self._dependencies(target)
        try:
            inputs = input_files(self.cache, dependencies, target.rule.reads_urls) if self.executor.runs_here else {}
        except OutputDamaged as damaged:
            return RunOutcome(AttemptStatus.FAILED, f"an input cannot be read: {damaged.message}")
        except StepFailed as refused:
            return RunOutcome(AttemptStatus.FAILED, str(refused))
        progress = functools.partial(self.reporter.step_progress, label)
        run = StepRun(
            label,
            planned.key,
            dict(target.attrs),
            attempt.staging,
            inputs,
            self.workspace,
            scratch,
            progress=progress,
            checkpoint=functools.partial(self._kept_by_running, planned, attempt) if publishes else None,
            env=self._environment(target.rule),
            sandbox=self.options.steps.sandbox,
            timeout_s=target.attrs["timeout"] or self.options.steps.timeout_s,
            settle_kept=settler(self.cache, target, planned.key, attempt.attempt_id, self.provenance.invocation)
            if publishes
            else None,
        )
        lease.on_lost = lambda: run.stop(AttemptStatus.LEASE_LOST)
        if lease.lost:
            run.stop(AttemptStatus.LEASE_LOST)
        self._track(run)
        try:
            with syncing(self.cache.store, planned.key, attempt.attempt_id, attempt.staging.log, mirror):
                return run.run(lambda context: self.executor.run(target, context, dependencies))
        finally:
            with self._runs_lock:
                self._runs.discard(run)

    def run_aside(self, label: str) -> tuple[Attempt, RunOutcome]:
        """Run a target whose key this scheduler knows (its dependencies are built) once
        more, aside, under its lease: recorded as an attempt, never published, its staging
        kept (`rerun --check` compares it with what is published, then removes it)."""
        target, key = self.graph.targets[label], self.result.results[label].key
        assert key is not None
        planned = _Planned(target, key, self._recipe(label))
        with self.cache.lease(key) as lease:
            info = {**self._attempt_info(planned, 1), "aside": "rerun --check"}
            attempt = self.cache.start_attempt(key, label, info, aside=True)
            scratch = attempt.staging.root / "scratch" if target.rule.resumable else None
            if scratch is not None:
                scratch.mkdir()
            started = time.monotonic()
            outcome = self._run(planned, attempt, lease, scratch, None, publishes=False)
            self.cache.finish_attempt(
                attempt,
                outcome.status,
                keep_staging=True,
                finished=_now(),
                duration_s=time.monotonic() - started,
                **outcome.record(),
            )
        return attempt, outcome

    def _environment(self, rule: Rule) -> dict[str, str]:
        return step_environment(os.environ, (*self.options.steps.action_env, *rule.env))

    def _track(self, run: StepRun) -> None:
        with self._runs_lock:
            self._runs.add(run)
            if self._interrupted:
                run.stop(AttemptStatus.CANCELLED)

    def _stop_all(self) -> None:
        """The build was interrupted: stop every running step (they record `cancelled`)."""
        with self._runs_lock:
            self._interrupted = True
            for run in self._runs:
                run.stop(AttemptStatus.CANCELLED)

    def _warn_code_drift(self) -> None:
        """One warning per rule whose source changed since cached outputs of it were built:
        the version, not the code, is identity, so they were served (docs/reproducibility.md)."""
        drifted: dict[str, list[str]] = {}
        for result in self.result.results.values():
            if result.code_changed:
                drifted.setdefault(self.graph.targets[result.label].rule.name, []).append(result.label)
        for rule, labels in drifted.items():
            shown = ", ".join(labels[:5]) + (f" and {len(labels) - 5} more" if len(labels) > 5 else "")
            self.reporter.warning(
                f"rule {rule}: rule code changed since this output was built ({shown}); "
                "bump the rule's version to rebuild"
            )

    def _dependencies(self, target: Target) -> Dependencies:
        return {
            label: self.graph.sources[label].path if label in self.graph.sources else self._outputs[label]
            for label in self.graph.deps[str(target.label)]
        }

    def _scratch(self, planned: _Planned) -> Path | None:
        return self.cache.store.scratch_dir(planned.key) if planned.target.rule.resumable else None


# Entries copied from mirrors at once (each a lease and a few requests around GCS's rewrites).
_PARALLEL_COPIES = 8


class _Tries:
    """Counts a step's attempts against its rule's retry policy."""

    def __init__(self, policy: RetryPolicy):
        self.policy = policy
        self.number = 1
        self.used = {"worker_lost": 0, "failed": 0}

    def again(self, failure: str | None) -> bool:
        """Whether to try again after an attempt that ended with `failure` (None: it
        succeeded, or must not be retried: interrupted, lease lost)."""
        if failure is None or self.used[failure] >= getattr(self.policy, failure):
            return False
        self.used[failure] += 1
        self.number += 1
        return True


def _add(used: Resources, need: Resources, sign: int) -> Resources:
    return Resources(cpu=used.cpu + sign * need.cpu, memory_gb=used.memory_gb + sign * need.memory_gb)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
