"""One host's share of a step on a Ray cluster: the actor that runs the rule there.

The actor fetches the step's inputs from the shared store into this host's local cache,
runs the rule in a worker process (`marinbuild.actions.execution.worker`, as locally), and, on
the first host of the step, publishes the states it keeps as it writes them (each an
entry of its own, docs/checkpoints.md; those it could not are published when the step
ends, and none stays in its output) and uploads the outputs under the key. It reports
through `poll()`: new log text, progress, the kept states published, and the outcome, so
the driver streams the log and progress while the step runs, and starts what reads a
kept state before the step ends. The driver kills the actor when the step ends; its worker
process dies with it (it asks the kernel to), so a killed actor leaves nothing running.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from marinbuild.actions.bookkeeping.build_provenance import Provenance
from marinbuild.actions.bookkeeping.machines import Machine
from marinbuild.actions.execution.attempt import StepRun
from marinbuild.actions.execution.executor import input_files, run_in_subprocess
from marinbuild.actions.execution.hermetic import step_environment
from marinbuild.actions.execution.kept_states import publish_kept_state, settle_kept_states
from marinbuild.hashing import StatCache
from marinbuild.memo import Memo
from marinbuild.store import ActionCache, AttemptStatus, Outputs, StoreSpec, open_store
from marinbuild.store.live_sync import syncing
from marinbuild.store.manifest import Manifest

# This host's own space (staging, copies of inputs, scratch of a remote store).
LOCAL_DIR = Path(tempfile.gettempdir()) / "marinbuild-ray"
# The node label Ray sets to the kind of accelerator it found on a node (`H100`, `TPU-V5P`).
_ACCELERATOR_LABEL = "ray.io/accelerator-type"


def this_node() -> dict[str, Any]:
    """Where this Ray worker (an actor or a task) runs, as its attempt records it
    (machines.py): the node's id and address, and the accelerators Ray gave this worker
    there (its resources of the kinds Ray counts as accelerators: GPU, TPU, …; none on a
    CPU-only node), with the node's accelerator kind where Ray labelled it."""
    import ray

    context = ray.get_runtime_context()
    assigned = context.get_assigned_resources()
    given = {name: float(assigned[name]) for name in context.get_accelerator_ids() if assigned.get(name)}
    return Machine(
        socket.gethostname(),
        ray.util.get_node_ip_address(),
        context.get_node_id(),
        context.get_node_labels().get(_ACCELERATOR_LABEL),
        tuple(sorted(given.items())),
    ).to_json()


def dependencies_to_json(dependencies: dict[str, Path | Outputs]) -> dict[str, Any]:
    return {
        label: {"source": str(item)}
        if isinstance(item, Path)
        else {
            "key": item.key,
            "tree_digest": item.tree_digest,
            "files": item.manifest.to_json(),
            "directory": item.directory,
        }
        for label, item in dependencies.items()
    }


def dependencies_from_json(data: dict[str, Any]) -> dict[str, Path | Outputs]:
    return {
        label: Path(item["source"])
        if "source" in item
        else Outputs(item["key"], item["tree_digest"], Manifest.from_json(item["files"]), item["directory"])
        for label, item in data.items()
    }


class StepHost:
    """Runs on one host; created for one step and killed when it ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._log: Path | None = None
        self._staging: Path | None = None
        self._offset = 0
        self._progress: list[Any] | None = None
        self._outcome: dict[str, Any] | None = None
        self._scratch_copy: Path | None = None  # this host's copy of a remote store's scratch
        self._kept: list[dict[str, Any]] = []  # kept states published since the last poll

    def address(self) -> dict[str, Any]:
        import ray

        return {
            "ip": ray.util.get_node_ip_address(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "machine": this_node(),
        }

    def free_port(self) -> int:
        with socket.socket() as probe:
            probe.bind(("", 0))
            return probe.getsockname()[1]

    def slice_name(self) -> str | None:
        """The TPU slice this host belongs to (asked of the actor holding a slice's head)."""
        import ray.util.tpu

        return ray.util.tpu.get_current_pod_name()

    def start(self, request: dict[str, Any]) -> None:
        threading.Thread(target=self._run, args=(request,), daemon=True).start()

    def poll(self) -> dict[str, Any]:
        """What happened since the last poll: log text, the latest progress, the outcome once done."""
        text = ""
        with self._lock:
            if self._log is not None and self._log.exists():
                with self._log.open("rb") as log:
                    log.seek(self._offset)
                    data = log.read()
                self._offset += len(data)
                text = data.decode(errors="replace")
            progress, self._progress = self._progress, None
            kept, self._kept = self._kept, []
            outcome = self._outcome if not _unsent(self._log, self._offset) else None
            if outcome is not None and self._staging is not None:
                shutil.rmtree(self._staging, ignore_errors=True)
            return {"log": text, "progress": progress, "kept": kept, "outcome": outcome}

    def discard_scratch(self) -> None:
        """The step succeeded on every host: this host's copy of its checkpoints is of no
        further use. (The store's copy is discarded by the driver when it publishes; on a
        local store the scratch directory is the driver's own, which it removes itself.)"""
        if self._scratch_copy is not None:
            shutil.rmtree(self._scratch_copy, ignore_errors=True)

    def _run(self, request: dict[str, Any]) -> None:
        try:
            store = open_store(StoreSpec(**request["store"]), LOCAL_DIR, StatCache(Memo(None, "ray-host")))
            cache = ActionCache(store, StatCache(Memo(None, "ray-host")), Memo(None, "ray-host"))
            staging = cache.new_staging()
            with self._lock:
                self._staging, self._log = staging.root, staging.log
            scratch = mirror = None
            if request["resumable"]:
                shared = request["shared_scratch"]
                scratch = store.scratch_dir(request["key"], Path(shared) if shared else None)
                if not store.scratch_is_shared:
                    self._scratch_copy = scratch
                    if request["uploads"]:  # the first host keeps the store's copy
                        mirror = store.scratch_mirror(request["key"], scratch)
                        if mirror is not None:
                            mirror.restore()
            inputs = input_files(cache, dependencies_from_json(request["dependencies"]), request["reads_urls"])
            # The step's part of a multi-host run (JAX distributed, Megascale), before its
            # environment is taken from this host's.
            env = {**os.environ, **(request["distributed"] or {}).get("env", {})}
            invocation = Provenance(Path(request["workspace"])).invocation  # who publishes kept states: this host
            run = StepRun(
                request["label"],
                request["key"],
                request["attrs"],
                staging,
                inputs,
                Path(request["workspace"]),
                scratch,
                request["distributed"],
                self._report_progress,
                self._publisher(cache, request, invocation) if request["uploads"] and request["keeps"] else None,
                env=step_environment(env, request["action_env"]),
                sandbox=request["sandbox"],
                settle_kept=functools.partial(
                    settle_kept_states,
                    cache,
                    request["label"],
                    request["key"],
                    request["keeps"],
                    attempt=request["attempt"],
                    invocation=invocation,
                )
                if request["uploads"] and request["keeps"] is not None
                else None,
            )
            upload = (
                (lambda manifest: cache.upload(request["key"], staging.out, manifest)) if request["uploads"] else None
            )
            with syncing(store, request["key"], "", None, mirror):
                ended = run.run(lambda context: run_in_subprocess(request["impl"], context), upload)
            outcome: dict[str, Any] = {"measured": ended.measured}
            if ended.status is AttemptStatus.SUCCEEDED:
                outcome["uploaded"] = None if ended.uploaded is None else ended.uploaded.to_json()
            elif ended.retry_as == "worker_lost":
                outcome["worker_lost"] = ended.error
            else:
                outcome["error"] = ended.error
        except Exception as error:  # noqa: BLE001 - reported to the driver, which fails the step
            outcome = {"error": f"{type(error).__name__} on host {socket.gethostname()}: {error}", "measured": {}}
        finally:
            if self._staging is not None:
                shutil.rmtree(self._staging / "out", ignore_errors=True)
                shutil.rmtree(self._staging / "work", ignore_errors=True)
        with self._lock:
            self._outcome = outcome

    def _publisher(
        self, cache: ActionCache, request: dict[str, Any], invocation: dict[str, Any]
    ) -> Callable[[int, Path], None]:
        """`ctx.publish_checkpoint` on the first host: the state is published from here, where
        its files are, as a local run publishes it, and announced to the driver by `poll()`,
        which then starts what reads it. A state that cannot be published now is published
        from the output when the step ends (`settle_kept`, here too)."""

        def publish(step: int, directory: Path) -> None:
            if step not in request["keeps"]:  # the driver warns of it, and publishes nothing
                with self._lock:
                    self._kept.append({"step": step, "directory": str(directory)})
                return
            try:
                outputs = publish_kept_state(
                    cache, request["label"], request["key"], step, directory, request["attempt"], invocation
                )
            except Exception as error:  # noqa: BLE001 - published from the output when the step ends
                with self._lock:
                    self._kept.append({"step": step, "directory": str(directory), "error": str(error)})
                return
            with self._lock:
                self._kept.append({"step": step, "directory": str(directory), "key": outputs.key})

        return publish

    def _report_progress(self, done: float, total: float | None, unit: str) -> None:
        with self._lock:
            self._progress = [done, total, unit]


def _unsent(log: Path | None, offset: int) -> bool:
    """Whether the log has bytes not yet sent (the outcome waits until they are)."""
    return log is not None and log.exists() and log.stat().st_size > offset
