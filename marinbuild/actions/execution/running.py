"""Running one step, on a worker thread: its attempts under the key's lease.

The worker takes the key's lease (following the log of the builder holding it, if any),
re-checks the cache, and runs attempts until one succeeds or the rule's retry policy is
spent; each is recorded in the store, run through `StepRun` (attempt.py), then
published or not. `rerun --check` runs a step once more the same way, aside.
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marinbuild.actions.bookkeeping.build_provenance import Provenance
from marinbuild.actions.bookkeeping.machines import Machine, this_machine
from marinbuild.actions.bookkeeping.results import Reporter
from marinbuild.actions.execution.attempt import RunOutcome, StepRun, utc_now
from marinbuild.actions.execution.build_options import BuildOptions, Hooks
from marinbuild.actions.execution.build_state import BuildState, Planned
from marinbuild.actions.execution.executor import Executor, input_files
from marinbuild.actions.execution.hermetic import recorded_environment, step_environment
from marinbuild.actions.execution.kept_states import kept_keys, settler
from marinbuild.actions.execution.resume import resume_point
from marinbuild.actions.execution.shards import ShardRunner, ShardStep, stored_files
from marinbuild.errors import OutputDamaged, StoreUnavailable
from marinbuild.store import ActionCache, Attempt, AttemptStatus, Lease, Outputs, reporting_transfers
from marinbuild.store.live_sync import syncing
from marinbuild.targets.compute import estimate
from marinbuild.targets.context import WARNINGS, StepFailed
from marinbuild.targets.rule import RetryPolicy, Rule, Target


@dataclass(frozen=True)
class Outcome:
    """How running a step ended, for the coordinator."""

    outputs: Outputs | None
    duration_s: float
    error: str | None = None
    log: Path | None = None
    ran: bool = True  # False when another builder published it while we waited
    attempt: str | None = None  # the id of the attempt that ran it
    failure: str | None = None  # "worker_lost" or "failed": which retry budget a failure uses


class AttemptRunner:
    """Runs the steps of one build through `executor`, reading their inputs from `state`;
    what a running step publishes of the states it keeps goes to `kept_by_running`
    (checkpoint_reads.py). It knows the steps running now, to stop them all at once."""

    def __init__(
        self,
        state: BuildState,
        cache: ActionCache,
        options: BuildOptions,
        reporter: Reporter,
        workspace: Path,
        executor: Executor,
        hooks: Hooks,
        provenance: Provenance,
        kept_by_running: Callable[[Planned, Attempt, int, Path], None],
    ):
        self.graph = state.graph
        self.cache = cache
        self.options = options
        self.reporter = reporter
        self.workspace = workspace
        self.executor = executor
        self.hooks = hooks
        self.provenance = provenance
        self._outputs = state.outputs
        self._keys = state.keys
        self._dependencies = state.dependencies
        self._code_digest = functools.partial(state.code_digest, stat_cache=cache.stat_cache)
        self._kept_by_running = kept_by_running
        self._interrupted = False  # set on Ctrl-C: running steps are stopped and record `cancelled`
        self._runs: set[StepRun] = set()  # the steps running now
        self._runs_lock = threading.Lock()
        self._here = this_machine().to_json()

    def execute(self, planned: Planned) -> Outcome:
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
                    return Outcome(again.outputs, time.monotonic() - started, ran=False)
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
            return Outcome(None, time.monotonic() - started, f"internal error:\n{traceback.format_exc()}")
        finally:
            if holder_log is not None:
                holder_log.stop()

    def _attempt_info(self, planned: Planned, number: int) -> dict[str, Any]:
        rule = planned.target.rule
        return {
            "attempt_number": number,
            "rule": rule.name,
            "rule_version": rule.version,
            "started": utc_now(),
            "invocation": self.provenance.invocation_id,
            "rule_code": self._code_digest(rule),
            # What `rerun` needs to rebuild the recipe from the store alone: every attribute
            # with its labels, and what each label stood for (dependencies by key).
            "attrs": dict(planned.target.attrs),
            "inputs": self._input_records(planned.target),
            "environment": recorded_environment(self._environment(rule)),
            **({"sandbox": True} if self.options.steps.sandbox else {}),
            **self.provenance.invocation,
            "packages": self.provenance.packages(rule.packages),
            **self._estimate(planned),
            # Where it runs (machines.py): this machine (a sharded step's driver too, until
            # its units ran elsewhere), or where the executor places it.
            "executor": self.executor.name,
            **({"ran_on": [self._here]} if self.executor.runs_here or rule.sharded else {}),
        }

    def _estimate(self, planned: Planned) -> dict[str, Any]:
        """What the build assumed the step would cost (targets/compute.py), recorded so that
        `show` and the report set it beside the time it took."""
        estimated = estimate(planned.target, self.graph.targets.get, self.options.utilisation)
        return {} if estimated is None else {"estimate": estimated.to_json()}

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

    def _attempt(self, planned: Planned, lease: Lease, number: int, started: float) -> Outcome:
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
        for message in outcome.measured.get(WARNINGS, []):
            self.reporter.warning(f"{label}: {message}")
        duration = time.monotonic() - started
        log = self.cache.records.log_file(key, attempt.attempt_id)
        if not outcome.succeeded:
            details = outcome.record()
            self.cache.finish_attempt(attempt, outcome.status, finished=utc_now(), duration_s=duration, **details)
            return Outcome(None, duration, outcome.error, log, attempt=attempt.attempt_id, failure=outcome.retry_as)
        measured = {"measured": outcome.measured} if outcome.measured else {}
        provenance = {**attempt.record, "finished": utc_now(), "duration_s": round(duration, 3), **measured}
        if planned.target.rule.keeps_checkpoints:  # its entry names them: `cache gc` keeps them with it
            provenance["checkpoints"] = kept_keys(key, planned.target.attrs[planned.target.rule.keeps_checkpoints])
        if outcome.shards:  # so does a sharded step's, its units (actions/execution/shards.py)
            provenance["shards"] = list(outcome.shards)
        provenance.pop("status", None)
        published = outcome.uploaded or outcome.manifest
        assert published is not None
        outputs = self.cache.publish(attempt, planned.recipe, provenance, published)
        self.cache.finish_attempt(attempt, AttemptStatus.SUCCEEDED, finished=utc_now(), duration_s=duration, **measured)
        if scratch is not None:  # published: the checkpoints are of no further use
            if mirror is not None:
                mirror.discard()
            shutil.rmtree(scratch, ignore_errors=True)
        return Outcome(outputs, duration, log=log, attempt=attempt.attempt_id)

    def _run(
        self,
        planned: Planned,
        attempt: Attempt,
        lease: Lease,
        scratch: Path | None,
        mirror: Any,
        publishes: bool = True,
    ) -> RunOutcome:
        """Run a step through its `StepRun`, stopped if the lease is lost or the build
        interrupted; `publishes`: the states it keeps are published as it reaches them, and
        the units of a sharded step as they end (else they run aside). A sharded step's
        impl runs here, whatever the executor: it only hands its units to the executor."""
        target, label = planned.target, str(planned.target.label)
        sharded = target.rule.sharded
        dependencies = self._dependencies(target)
        try:
            here = self.executor.runs_here or sharded
            inputs = input_files(self.cache, dependencies, target.rule.reads_urls) if here else {}
        except OutputDamaged as damaged:
            return RunOutcome(AttemptStatus.FAILED, f"an input cannot be read: {damaged.message}")
        except StepFailed as refused:
            return RunOutcome(AttemptStatus.FAILED, str(refused))
        progress = functools.partial(self.reporter.step_progress, label)
        timeout_s = target.attrs["timeout"] or self.options.steps.timeout_s
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
            timeout_s=timeout_s,
            settle_kept=settler(self.cache, target, planned.key, attempt.attempt_id, self.provenance.invocation)
            if publishes
            else None,
        )
        shards = None
        if sharded:
            step = ShardStep(
                target,
                planned.key,
                planned.recipe,
                attempt.record,
                self.workspace,
                self._environment(target.rule),
                self.options.steps.sandbox,
                timeout_s,
                self.executor.unit_slots(target.resources),
                aside=not publishes,
            )
            stored = stored_files(self.cache, dependencies, inputs)
            shards = ShardRunner(self.cache, self.executor, step, stored, lambda: run.stopped_as)
            run.context.shard_fn = shards.map
        lease.on_lost = lambda: run.stop(AttemptStatus.LEASE_LOST)
        if lease.lost:
            run.stop(AttemptStatus.LEASE_LOST)
        self._track(run)
        try:
            with syncing(self.cache.store, planned.key, attempt.attempt_id, attempt.staging.log, mirror):
                if sharded:
                    return run.run(target.rule.impl)
                placed = functools.partial(self._placed, attempt)
                return run.run(lambda context: self.executor.run(target, context, dependencies, placed))
        finally:
            with self._runs_lock:
                self._runs.discard(run)
            if shards is not None:
                shards.discard_aside()
                if shards.ran_on:  # the nodes its units ran on, each once with its count
                    attempt.record["ran_on"] = [machine.to_json() for machine in shards.ran_on]

    def _placed(self, attempt: Attempt, machines: Sequence[Machine]) -> None:
        """The executor placed the attempt: its record says where at once, so that a slow
        run's host can be found while it runs, and a failed one's once it ended."""
        attempt.record["ran_on"] = [machine.to_json() for machine in machines]
        self.cache.records.write_attempt(attempt.record)

    def run_aside(self, planned: Planned) -> tuple[Attempt, RunOutcome]:
        """Run a planned step once more, aside, under its lease: recorded as an attempt,
        never published, its staging kept."""
        target, key, label = planned.target, planned.key, str(planned.target.label)
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
                finished=utc_now(),
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

    def stop_all(self) -> None:
        """The build was interrupted: stop every running step (they record `cancelled`)."""
        with self._runs_lock:
            self._interrupted = True
            for run in self._runs:
                run.stop(AttemptStatus.CANCELLED)

    def _scratch(self, planned: Planned) -> Path | None:
        return self.cache.store.scratch_dir(planned.key) if planned.target.rule.resumable else None


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
