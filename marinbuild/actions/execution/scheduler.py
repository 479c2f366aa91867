"""Execution: run the stale steps of a graph, in parallel, within the machine's resources.

One coordinator thread walks the graph in dependency order, composing the parts of a
build: the planner (planning.py) computes the keys of the targets whose inputs are known
and resolves their hits; what the store lacks and a mirror holds is copied
(mirror_copies.py); queued steps start while they fit the machine (`--jobs`, declared
CPUs and memory), each on a worker thread (running.py) that takes the key's lease,
re-checks the cache, runs the rule, and publishes; a target that reads a kept checkpoint
waits for that state only (checkpoint_reads.py). What the build knows as it goes is
build_state.py's. A failure skips everything downstream of it; without `--keep-going`
nothing new starts after the first failure.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from marinbuild.actions.analysis.graph import Graph
from marinbuild.actions.bookkeeping.build_provenance import Provenance
from marinbuild.actions.bookkeeping.results import BuildResult, NullReporter, Reporter, Status, TargetResult
from marinbuild.actions.execution.attempt import RunOutcome
from marinbuild.actions.execution.build_options import BuildOptions, Hooks
from marinbuild.actions.execution.build_state import BuildState, Planned
from marinbuild.actions.execution.checkpoint_reads import CheckpointReads
from marinbuild.actions.execution.executor import Executor, LocalExecutor
from marinbuild.actions.execution.mirror_copies import MirrorCopies
from marinbuild.actions.execution.planning import Planner
from marinbuild.actions.execution.running import AttemptRunner, Outcome
from marinbuild.errors import EgressOverBudget, StoreReadOnly, StoreUnavailable
from marinbuild.store import ActionCache, Attempt, Outputs
from marinbuild.store.mirrors import MirrorHit
from marinbuild.targets.rule import Resources


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
        hooks: Hooks | None = None,
    ):
        self.graph = graph
        self.hooks = hooks or Hooks()
        self.cache = cache
        self.salt = salt
        self.options = options
        self.reporter = reporter
        self.workspace = workspace
        self.provenance = Provenance(workspace)
        self.state = BuildState(graph, reporter)
        self.result = self.state.result
        self.mirror_copies = MirrorCopies(self.state, cache, options, reporter, self._resolve, self._foresee)
        self.checkpoints = CheckpointReads(
            self.state, cache, options, self.provenance, reporter, self._resolve, self.mirror_copies.foreseen
        )
        self.planner = Planner(
            self.state, cache, salt, options, self.hooks, self._resolve, self.checkpoints, self.mirror_copies
        )
        self.runner = AttemptRunner(
            self.state,
            cache,
            options,
            reporter,
            workspace,
            executor or LocalExecutor(),
            self.hooks,
            self.provenance,
            self.checkpoints.kept_by_running,
        )

    @property
    def read_only(self) -> StoreReadOnly | None:
        """Set when the store refuses writes: cached targets are served, a step to run is an error."""
        return self.planner.read_only

    @read_only.setter
    def read_only(self, refused: StoreReadOnly | None) -> None:
        self.planner.read_only = refused

    @property
    def foreseen(self) -> dict[str, MirrorHit]:
        """Every target found in a mirror (a dry run's are foreseen)."""
        return self.mirror_copies.foreseen

    def recipe(self, label: str) -> dict[str, Any] | None:
        """The recipe of a target whose key this build knows (None for the others)."""
        return self.planner.recipe(label)

    # -- the coordinator loop ------------------------------------------------------------

    def run(self) -> BuildResult:
        started = time.monotonic()
        self.reporter.build_started(len(self.graph.targets))
        self.planner.hash_sources()
        self.cache.list_entries(len(self.graph.targets))
        self.cache.read_ahead(self.planner.foreseen_keys)
        ready = self.state.ready
        ready.extend(label for label in self.graph.order if self.state.waiting[label] == 0)
        queued: deque[Planned] = deque()
        running: dict[Future[Outcome], Planned] = {}
        used = Resources(cpu=0.0, memory_gb=0.0)
        stopping = False
        with ThreadPoolExecutor(max_workers=self.options.jobs, thread_name_prefix="step") as pool:
            try:
                while ready or (queued and not stopping) or running:
                    self.checkpoints.take_announced()
                    while ready:
                        queued.extend(self.planner.plan_ready())
                        if self.mirror_copies.pending:
                            self.mirror_copies.copy_pending()  # resolves them: what follows is ready
                    while queued and not stopping and len(running) < self.options.jobs:
                        planned = self._take_fitting(queued, used, bool(running))
                        if planned is None:
                            break
                        used = _add(used, planned.target.resources, +1)
                        self.reporter.step_started(str(planned.target.label))
                        running[pool.submit(self.runner.execute, planned)] = planned
                    if not running:
                        continue
                    try:
                        done, _ = wait([*running, self.checkpoints.wake], return_when=FIRST_COMPLETED)
                    except KeyboardInterrupt:
                        self.runner.stop_all()  # before the pool waits for the running steps to end
                        raise
                    self.checkpoints.take_announced()  # published before the step that kept them ended
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
                self.runner.stop_all()
                raise
        for label in self.graph.order:
            if label not in self.result.results:
                self.state.record(
                    TargetResult(label, Status.SKIPPED, reason="not started: the build stopped after a failure")
                )
        self.cache.stat_cache.save()
        self.cache.memo.save()
        self.result.results = {label: self.result.results[label] for label in self.graph.order}
        self.result.elapsed_s = time.monotonic() - started
        self._warn_code_drift()
        self.reporter.build_finished(self.result)
        return self.result

    def _foresee(self) -> dict[str, MirrorHit]:
        """Every copy from mirrors this build can foresee: a dry run of its graph."""
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
        return ahead.foreseen

    def _take_fitting(self, queued: deque[Planned], used: Resources, busy: bool) -> Planned | None:
        """The first queued step that fits next to the running ones (anything fits an idle machine)."""
        capacity = self.options.capacity
        for index, planned in enumerate(queued):
            need = planned.target.resources
            fits = used.cpu + need.cpu <= capacity.cpu + 1e-9 and used.memory_gb + need.memory_gb <= capacity.memory_gb
            if fits or not busy:
                del queued[index]
                return planned
        return None

    def _finish(self, planned: Planned, outcome: Outcome) -> bool:
        label = str(planned.target.label)
        if outcome.outputs is None:
            self.state.record(
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
            for dependent in self.state.downstream(label):
                self.state.record(TargetResult(dependent, Status.SKIPPED, reason=f"dependency {label} failed"))
            return False
        status = Status.BUILT if outcome.ran else Status.CACHED
        why = planned.why if outcome.ran else None
        self.state.record(
            TargetResult(
                label, status, planned.key, outcome.outputs.directory, outcome.duration_s, why, attempt=outcome.attempt
            )
        )
        self._resolve(label, outcome.outputs)
        return True

    def _resolve(self, label: str, outputs: Outputs) -> None:
        """A target's (or a kept state's) outputs are known: dependents whose inputs are now
        all known become ready. Once a target's outputs are known, so are its kept states."""
        if not self.state.known(label, outputs):
            return
        for name in self.state.kept.get(label, ()):
            if name not in self.state.outputs:
                self.checkpoints.resolve_from_output(name, outputs)

    def run_aside(self, label: str) -> tuple[Attempt, RunOutcome]:
        """Run a target whose key this scheduler knows (its dependencies are built) once
        more, aside, under its lease: recorded as an attempt, never published, its staging
        kept (`rerun --check` compares it with what is published, then removes it)."""
        target, key = self.graph.targets[label], self.result.results[label].key
        assert key is not None
        return self.runner.run_aside(Planned(target, key, self.planner.recipe_of(label)))

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


def _add(used: Resources, need: Resources, sign: int) -> Resources:
    return Resources(cpu=used.cpu + sign * need.cpu, memory_gb=used.memory_gb + sign * need.memory_gb)
