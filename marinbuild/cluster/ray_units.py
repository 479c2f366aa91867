"""One unit of a sharded step as a Ray task (`--executor ray`; actions/execution/shards.py).

The driver of a sharded step runs in the builder, which holds each unit's lease, records
its attempt and commits its entry, as for any step on the cluster. What runs on the
cluster is the unit itself: a plain Ray task that opens the store from its spec, fetches
the unit's input files from it (an input's file by its output's key, verified; a file
the step made itself from the store's blobs), runs the unit in a worker process there
(`marinbuild.actions.execution.worker`, as locally), and uploads its outputs under the unit's key.
It returns its log, its last progress, what it measured and the node it ran on with the
outcome. Ray schedules the tasks over the cluster's CPUs, one each: no scheduler of
marinbuild's own.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marinbuild.actions.execution.attempt import StepRun
from marinbuild.actions.execution.executor import UnitInput, run_in_subprocess
from marinbuild.actions.execution.hermetic import step_environment
from marinbuild.cluster.ray_host import LOCAL_DIR, this_node
from marinbuild.hashing import StatCache
from marinbuild.memo import Memo
from marinbuild.store import ActionCache, AttemptStatus, StoreSpec, layout, open_store
from marinbuild.store.entries import Staging
from marinbuild.store.manifest import FileEntry, Manifest
from marinbuild.targets.context import Context, InputFiles, StepFailed


def unit_request(
    store: StoreSpec,
    workspace: Path,
    impl: str,
    context: Context,
    inputs: Mapping[str, UnitInput],
    action_env: list[str],
    sandbox: bool,
) -> dict[str, Any]:
    """What `run_unit` needs, as JSON: the store, the unit (its key, function, attributes),
    where each input file is in the store, and how its processes run (the environment
    variables they are given, the sandbox)."""
    return {
        "store": dataclasses.asdict(store),
        "workspace": str(workspace),
        "impl": impl,
        "label": context.label,
        "key": context.key,
        "attrs": context.attrs,
        "inputs": {
            role: {"key": item.key, "file": [item.entry.path, item.entry.digest, item.entry.size]}
            for role, item in inputs.items()
        },
        "action_env": action_env,
        "sandbox": sandbox,
    }


def run_unit(request: dict[str, Any]) -> dict[str, Any]:
    """The Ray task: run one unit on this host and upload its outputs under its key."""
    progress: list[Any] = []

    def keep_progress(done: float, total: float | None, unit: str) -> None:
        progress[:] = [done, total, unit]

    report: dict[str, Any] = {"log": "", "progress": None, "measured": {}}
    staging: Staging | None = None
    try:
        report["machine"] = this_node()  # where the unit ran, for its attempt record
        store = open_store(StoreSpec(**request["store"]), LOCAL_DIR, StatCache(Memo(None, "ray-unit")))
        cache = ActionCache(store, StatCache(Memo(None, "ray-unit")), Memo(None, "ray-unit"))
        staging = cache.new_staging()
        out = staging.out
        files = {role: _fetch(cache, staging, role, item) for role, item in request["inputs"].items()}
        run = StepRun(
            request["label"],
            request["key"],
            request["attrs"],
            staging,
            {role: InputFiles(path, (path,), str(path)) for role, path in files.items()},
            Path(request["workspace"]),
            progress=keep_progress,
            env=step_environment(os.environ, request["action_env"]),
            sandbox=request["sandbox"],
        )
        ended = run.run(
            lambda context: run_in_subprocess(request["impl"], context),
            lambda manifest: cache.upload(request["key"], out, manifest),
        )
        report["measured"] = ended.measured
        if ended.status is AttemptStatus.SUCCEEDED:
            assert ended.uploaded is not None
            report["uploaded"] = ended.uploaded.to_json()
        elif ended.retry_as == "worker_lost":
            report["worker_lost"] = ended.error
        else:
            report["error"] = ended.error
    except Exception as error:  # noqa: BLE001 - reported to the driver, which fails the unit
        report["error"] = f"{type(error).__name__} on host {socket.gethostname()}: {error}"
    finally:
        if staging is not None:
            if staging.log.exists():
                report["log"] = staging.log.read_text(errors="replace")
            shutil.rmtree(staging.root, ignore_errors=True)
    report["progress"] = progress or None
    return report


def _fetch(cache: ActionCache, staging: Staging, role: str, item: dict[str, Any]) -> Path:
    """An input file of the unit on this host: an output's file from this host's verified
    copy of it (in place on a local store), or the blob of a file the step made."""
    entry = FileEntry(*item["file"])
    if item["key"] is not None:
        root = cache.store.outputs_dir(layout.output(item["key"]), Manifest((entry,)))
        return root / entry.path
    path = staging.root / "inputs" / role / Path(entry.path).name
    if not cache.get_blob(entry.digest, path):
        raise StepFailed(f"input {role!r} ({entry.digest[:12]}) is missing from the store's blobs")
    return path
