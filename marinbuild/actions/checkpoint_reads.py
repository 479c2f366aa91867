"""Targets that read a kept checkpoint: the state a step keeps, not its whole output.

A target that reads another's kept state (`eval_lm(model = ":run", step = 2000)`) waits
for that state, not for the whole step: it is resolved from its own entry as soon as the
running step publishes it (`ctx.publish_checkpoint`; a worker thread announces it and
wakes the coordinator), or found in the store, or taken from the output once the step
that keeps it is done. Publishing one state as an entry is actions/kept_states.py's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from marinbuild.actions import keys
from marinbuild.actions.build_options import BuildOptions
from marinbuild.actions.build_provenance import Provenance
from marinbuild.actions.build_state import BuildState, Planned
from marinbuild.actions.graph import Checkpoint
from marinbuild.actions.kept_states import publish_kept_state
from marinbuild.actions.results import Reporter, Status, TargetResult
from marinbuild.store import ActionCache, Attempt, Outputs
from marinbuild.store.manifest import FileEntry, Manifest
from marinbuild.targets.rule import checkpoint_dir, checkpoint_name


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
        """A kept state of a target whose output is known: its entry, else published from
        that output (a step run where nothing relayed its states, or an entry collected
        since). A dry run publishes nothing: the state's digest follows from the manifest."""
        checkpoint = self.graph.checkpoints[name]
        key = self._checkpoint_key(name)
        found = self.cache.lookup(key).outputs
        if found is None:
            prefix = checkpoint_dir(checkpoint.step) + "/"
            part = Manifest(
                tuple(
                    FileEntry(item.path.removeprefix(prefix), item.digest, item.size)
                    for item in outputs.manifest.files
                    if item.path.startswith(prefix)
                )
            )
            if not part.files:
                why = f"{checkpoint.of} published no checkpoint at step {checkpoint.step} in its output"
                for dependent in self._downstream(name):
                    self._record(TargetResult(dependent, Status.SKIPPED, reason=why))
                return
            if self.options.dry_run:
                found = Outputs(key, part.tree_digest, part, outputs.directory)
            else:
                files = self.cache.local_dir(outputs) / checkpoint_dir(checkpoint.step)
                found = self._publish_checkpoint(checkpoint, outputs.key, files)
        self._resolve(name, found)

    def _publish_checkpoint(
        self, checkpoint: Checkpoint, of_key: str, files: Path, attempt: str | None = None
    ) -> Outputs:
        return publish_kept_state(
            self.cache, checkpoint.of, of_key, checkpoint.step, files, attempt, self.provenance.invocation
        )

    def kept_by_running(self, planned: Planned, attempt: Attempt, step: int, files: Path) -> None:
        """`ctx.publish_checkpoint` of a running step (on its worker thread): publish the
        state, and wake the coordinator if targets of this build read it."""
        label = str(planned.target.label)
        kept = planned.target.attrs.get(planned.target.rule.keeps_checkpoints or "") or []
        if step not in kept:
            self.reporter.warning(f"{label}: published a checkpoint at step {step}, which it does not keep; ignored")
            return
        try:
            outputs = self._publish_checkpoint(Checkpoint(label, step), planned.key, files, attempt.attempt_id)
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
