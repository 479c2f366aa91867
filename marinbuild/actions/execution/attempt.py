"""One run of a step, from its staging directory to its outcome.

The scheduler, `rerun --check` and a Ray host all run a step the same way: a context
over a staging directory, the rule's body (in this process, in a worker process, or on a
cluster), the outputs hashed and checked, and what happened classified. `StepRun` is
that sequence, written once, so that whatever guards a step is written once too.

What it does not do is the bookkeeping around an attempt — the lease, the attempt
record, publishing — which belongs to whoever runs it (the scheduler holds the lease
and publishes; a Ray host only runs and uploads; `rerun --check` never publishes).
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.actions.execution.hermetic import compilation_cache, sandbox_command
from marinbuild.actions.execution.logs import close_logger, step_logger
from marinbuild.hashing import clock_mark
from marinbuild.store import AttemptStatus
from marinbuild.store.entries import Staging, Uploaded
from marinbuild.store.manifest import Manifest, OutputError, hash_tree
from marinbuild.targets.attrs import JsonValue
from marinbuild.targets.context import (
    CheckpointFn,
    ChildProcesses,
    Context,
    InputFiles,
    ProgressFn,
    ShardFn,
    StepFailed,
)

# What holds marinbuild/ (this is marinbuild/actions/execution/attempt.py).
_MARINBUILD_SOURCE = Path(__file__).resolve().parents[3]


class WorkerLost(Exception):
    """The process (or host) running a step died without reporting: preempted, killed,
    out of memory. Unlike a failure of the step itself, trying again may well succeed."""


# The body of a run: the rule itself, run by an executor. Returns outputs a remote host
# already uploaded, or None when they are in `context.out`.
Body = Callable[[Context], "Uploaded | None"]

# Why a run was stopped from outside, and what the attempt then records.
_STOP_MESSAGES = {
    AttemptStatus.CANCELLED: "the build was interrupted while the step ran",
    AttemptStatus.LEASE_LOST: "lost the lease on this key to another builder; stopped the step and did not publish it",
    AttemptStatus.TIMED_OUT: "the step ran past its timeout of {timeout_s:g} s; its processes were killed",
}
# A step killed by a signal may have died of the very Ctrl-C that stops the build, which
# the builder may not have acted on yet: how long to wait for it to say so.
_SIGNAL_GRACE_S = 2.0


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended. Only `succeeded` has outputs: `manifest` (hashed in staging) or
    `uploaded` (a remote host uploaded them under the key)."""

    status: AttemptStatus
    error: str | None = None
    exit_status: int | None = None
    # Which retry budget a failure may use: "worker_lost" or "failed"; None: never retried
    # (it succeeded, or it was stopped from outside).
    retry_as: str | None = None
    manifest: Manifest | None = None
    uploaded: Uploaded | None = None
    measured: dict[str, JsonValue] = field(default_factory=dict)
    shards: tuple[str, ...] = ()  # the keys of the units a sharded step mapped (`ctx.map_shards`)

    @property
    def succeeded(self) -> bool:
        return self.status is AttemptStatus.SUCCEEDED

    def record(self) -> dict[str, Any]:
        """What the attempt record keeps of it (besides the status and times)."""
        details: dict[str, Any] = {}
        if self.error is not None:
            details["error"] = self.error
        if self.exit_status is not None:
            details["exit_status"] = self.exit_status
        if self.retry_as is not None:
            details["failure"] = self.retry_as
        if self.measured:
            details["measured"] = self.measured
        return details


class StepRun:
    """A step's context over a staging directory, and the one way of running it.

    `env` is the environment of its processes (`hermetic.step_environment`); `sandbox`
    runs them under bubblewrap, with only the staging directory, the scratch and the JAX
    compilation cache `env` names writable; `timeout_s` stops the run as `timed_out` once
    it has run that long; `checkpoint` publishes the states it keeps as it reaches them,
    and `settle_kept`, given the output once the step ended, makes each an entry of its own
    and leaves them out of the output (kept_states.settle_kept_states), so that they are
    stored once however the step ran; `shards` runs the units of a sharded step
    (actions/execution/shards.py)."""

    def __init__(
        self,
        label: str,
        key: str,
        attrs: dict[str, JsonValue],
        staging: Staging,
        inputs: dict[str, InputFiles],
        workspace: Path,
        scratch: Path | None = None,
        distributed: dict[str, Any] | None = None,
        progress: ProgressFn | None = None,
        checkpoint: CheckpointFn | None = None,
        shards: ShardFn | None = None,
        env: dict[str, str] | None = None,
        sandbox: bool = False,
        timeout_s: float | None = None,
        settle_kept: Callable[[Path], None] | None = None,
    ):
        self.staging = staging
        self.settle_kept = settle_kept
        self.timeout_s = timeout_s
        writable = [staging.root, *([scratch] if scratch is not None else [])]
        cache = compilation_cache(env) if sandbox else None
        if cache is not None:  # JAX writes the programs it compiles there (hermetic.py)
            cache.mkdir(parents=True, exist_ok=True)
            writable.append(cache)
        # What the step reads: the workspace (its sources, rule code), its inputs, Python, and
        # where marinbuild is installed: for an editable install its checkout, which holds
        # the `rules` package too (under /tmp, the sandbox's private /tmp would hide it).
        readable = [workspace, *(files.root for files in inputs.values() if files.root is not None)]
        readable += [Path(sys.prefix), Path(sys.base_prefix), _MARINBUILD_SOURCE]
        self.context = Context(
            label=label,
            key=key,
            attrs=attrs,
            inputs=inputs,
            out=staging.out,
            tmp=staging.work,
            log_path=staging.log,
            workspace=workspace,
            scratch=scratch,
            distributed=distributed,
            progress_fn=progress,
            checkpoint_fn=checkpoint,
            shard_fn=shards,
            processes=ChildProcesses(env, sandbox_command(readable, writable) if sandbox else None),
        )
        self._lock = threading.Lock()
        self._stopped_as: AttemptStatus | None = None
        self._stopped = threading.Event()

    def stop(self, status: AttemptStatus) -> None:
        """Stop the run from outside (the build was interrupted, the lease was lost): its
        processes are killed, and it ends with `status`. The first reason given wins."""
        with self._lock:
            if self._stopped_as is None:
                self._stopped_as = status
        self._stopped.set()
        self.context.processes.stop()

    @property
    def stopped_as(self) -> AttemptStatus | None:
        """Why the run was stopped from outside, if it was."""
        with self._lock:
            return self._stopped_as

    def run(self, body: Body, upload: Callable[[Manifest], Uploaded | None] | None = None) -> RunOutcome:
        """Run `body` and classify what happened. Outputs left in staging are hashed (a
        symlink among them fails the step), after `settle_kept` took the kept states out;
        `upload` then takes them (a Ray host's)."""
        context = self.context
        context.log = step_logger(context.label, self.staging.log)
        timer = None
        if self.timeout_s is not None:
            timer = threading.Timer(self.timeout_s, self.stop, (AttemptStatus.TIMED_OUT,))
            timer.daemon = True
            timer.start()
        manifest = uploaded = None
        error = retry_as = None
        exit_status: int | None = None
        try:
            uploaded = body(context)
            if uploaded is None:
                if self.settle_kept is not None:
                    self.settle_kept(context.out)
                clock_mark(self.staging.mark)  # before hashing: which files' digests are settled
                manifest = hash_tree(context.out)
                uploaded = upload(manifest) if upload is not None else None
        except WorkerLost as lost:
            error, retry_as = f"worker lost: {lost}", "worker_lost"
        except StepFailed as failed:
            error, exit_status, retry_as = str(failed), failed.exit_status, "failed"
        except OutputError as bad:
            error, retry_as = str(bad), "failed"
        except Exception as failed:  # noqa: BLE001 - the rule's own bug, reported with its traceback
            context.log.error("%s", traceback.format_exc())
            error, retry_as = f"{type(failed).__name__}: {failed}", "failed"
        finally:
            if timer is not None:
                timer.cancel()
            close_logger(context.log)
        measured = dict(context.measured)
        shards = tuple(context.shard_keys)
        stopped_as = self._stop_reason(error is not None and exit_status is not None and exit_status < 0)
        # A lost lease voids even a success (another builder owns the key now); an
        # interrupted or timed-out run publishes what finished before it was stopped.
        if stopped_as is AttemptStatus.LEASE_LOST or (stopped_as is not None and error is not None):
            message = _STOP_MESSAGES[stopped_as].format(timeout_s=self.timeout_s or 0)
            because = f": {error}" if error is not None else ""
            return RunOutcome(stopped_as, message + because, exit_status, measured=measured)
        if error is not None:
            return RunOutcome(AttemptStatus.FAILED, error, exit_status, retry_as, measured=measured)
        return RunOutcome(
            AttemptStatus.SUCCEEDED, manifest=manifest, uploaded=uploaded, measured=measured, shards=shards
        )

    def _stop_reason(self, killed_by_signal: bool) -> AttemptStatus | None:
        if killed_by_signal:
            self._stopped.wait(_SIGNAL_GRACE_S)
        with self._lock:
            return self._stopped_as


def utc_now() -> str:
    """The time an attempt starts or ends, as its record says it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
