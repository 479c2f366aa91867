"""Targets that read a kept checkpoint: the state a step keeps, not its whole output.

A target that reads another's kept state (`eval_lm(model = ":run", step = 2000)`) waits
for that state, not for the whole step: it is resolved from its own entry as soon as the
running step publishes it (`ctx.publish_checkpoint`; a worker thread announces it and
wakes the coordinator), or found in the store, where the step that keeps it publishes
it at the latest when it ends. Publishing one state as an entry is kept_states.py's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from marinbuild.actions.analysis import keys
from marinbuild.actions.bookkeeping.build_provenance import Provenance
from marinbuild.actions.bookkeeping.results import Reporter, Status, TargetResult
from marinbuild.actions.execution.build_options import BuildOptions
from marinbuild.actions.execution.build_state import BuildState, Planned
from marinbuild.actions.execution.kept_states import kept_in_output, publish_kept_state
from marinbuild.store import ActionCache, Attempt, Outputs
from marinbuild.store.mirrors import MirrorHit
from marinbuild.targets.rule import checkpoint_name


class CheckpointReads:
    """The kept states the graph reads, resolved into `state` through `resolve` (the
    scheduler's: a state known makes its readers ready). Its methods run on the
    coordinator's thread but `kept_by_running`, which a running step calls on its worker
    thread: it hands what it published over through `_announced` and sets `wake`."""

    def __init__(
        self,
        state: BuildState,
        cache: ActionCache,
        options: BuildOptions,
        provenance: Provenance,
        reporter: Reporter,
        resolve: Callable[[str, Outputs], None],
        foreseen: dict[str, MirrorHit],
    ):
        self.graph = state.graph
        self.cache = cache
        self.options = options
        self.provenance = provenance
        self.reporter = reporter
        self._keys = state.keys
        self._kept = state.kept
        self._dependents = state.dependents
        self._record = state.record
        self._downstream = state.downstream
        self._resolve = resolve
        self._foreseen = foreseen  # what a dry run found in mirrors (mirror_copies.py)
        # Kept states published by running steps, for the coordinator; `_wake` ends its wait.
        self._announced: list[tuple[str, Outputs]] = []
        self._wake: Future[None] = Future()
        self._wake_lock = threading.Lock()

    @property
    def wake(self) -> Future[None]:
        """Done once a running step announced a kept state the coordinator has not taken."""
        return self._wake

    def resolve_published(self, label: str) -> None:
        """Resolve the kept states of `label`, which runs, that a build (maybe one that failed) published."""
        for name in self._kept.get(label, ()):
            kept = self.cache.lookup(self._checkpoint_key(name)).outputs
            if kept is not None:
                self._resolve(name, kept)

    def _checkpoint_key(self, name: str) -> str:
        checkpoint = self.graph.checkpoints[name]
        return keys.checkpoint_key(self._keys[checkpoint.of], checkpoint.step)

    def resolve_from_output(self, name: str, outputs: Outputs) -> None:
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
        hit = self._foreseen.get(of) if self.options.dry_run else None
        state = hit.kept_state(key) if hit is not None else None
        return self.cache.mirrors.outputs(state) if state is not None and self.cache.mirrors is not None else None

    def kept_by_running(self, planned: Planned, attempt: Attempt, step: int, files: Path) -> None:
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

    def take_announced(self) -> None:
        """Resolve the kept states running steps announced (on the coordinator's thread)."""
        with self._wake_lock:
            announced, self._announced = self._announced, []
            if self._wake.done():
                self._wake = Future()
        for name, outputs in announced:
            self._resolve(name, outputs)
