"""Executors: where one attempt of a step runs. The scheduler keeps the lease, the
attempt records and publication; an executor only runs the rule.

`LocalExecutor` runs a rule in the builder (THREAD) or in a worker process on this
machine (SUBPROCESS). The Ray executor (`marinbuild/cluster/ray_executor.py`) runs it on
a cluster's hosts, which upload the outputs under the key themselves.
"""

from __future__ import annotations

import abc
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from marinbuild.actions.bookkeeping.machines import Machine
from marinbuild.actions.execution.attempt import WorkerLost
from marinbuild.store import ActionCache, Outputs
from marinbuild.store.entries import Uploaded
from marinbuild.store.manifest import FileEntry
from marinbuild.targets.context import Context, InputFiles, StepFailed
from marinbuild.targets.rule import Execution, Resources, Target

# What a step reads: a workspace source file, or a dependency's published outputs.
Dependencies = Mapping[str, "Path | Outputs"]
# Told where an attempt runs, once an executor that runs it elsewhere knows (machines.py).
Placed = Callable[[Sequence[Machine]], None]


class Executor(abc.ABC):
    # True: steps run on this machine, with inputs and scratch the scheduler prepares here;
    # False: the executor's hosts fetch inputs and keep scratch themselves.
    runs_here: bool = True
    name = "local"  # as attempt records name it (`executor`)

    @abc.abstractmethod
    def run(
        self, target: Target, context: Context, dependencies: Dependencies, placed: Placed | None = None
    ) -> Uploaded | None:
        """Run one attempt. Returns outputs already uploaded under the key by a remote
        worker, or None when they are in `context.out`. Raises StepFailed when the step
        failed, WorkerLost when its worker died. An executor that runs it elsewhere tells
        `placed` the machines it runs on before it runs (so that a failure names them)."""

    def run_unit(
        self,
        target: Target,
        impl: str,
        context: Context,
        inputs: Mapping[str, UnitInput],
        placed: Placed | None = None,
    ) -> Uploaded | None:
        """Run one unit (`impl` over `inputs`) of the sharded step `target` (actions/execution/shards.py):
        here, in a worker process. Returns outputs already uploaded under the unit's key, or
        None when they are in `context.out`; raises as `run` does."""
        run_in_subprocess(impl, context)
        return None

    def unit_slots(self, resources: Resources) -> int:
        """How many units of a sharded step asking for `resources` run at once: here, one
        per CPU it asks for (the scheduler reserved them for it)."""
        return max(1, int(resources.cpu))

    def close(self) -> None:
        """Release what the executor holds (a cluster connection)."""


@dataclass(frozen=True)
class UnitInput:
    """A file a shard unit reads: `path` on this machine, and `entry` (its digest and
    size) with where a host elsewhere finds it in the store — the file `entry.path` of
    the output of `key`, or, where `key` is None (a file the step made itself), the
    store's blob of its digest."""

    path: Path
    entry: FileEntry
    key: str | None


def input_files(cache: ActionCache, dependencies: Dependencies, reads_urls: bool) -> dict[str, InputFiles]:
    """Each input as local files (a source in place, outputs through the store's local
    copy), except that a rule which reads URLs downloads nothing from a remote store."""
    by_url = reads_urls and cache.store.step_inputs_by_url
    inputs: dict[str, InputFiles] = {}
    for label, dependency in dependencies.items():
        if isinstance(dependency, Path):
            inputs[label] = InputFiles(dependency, (dependency,), str(dependency))
        elif dependency.pinned:
            inputs[label] = _pinned_files(label, dependency, reads_urls)
        elif by_url:
            inputs[label] = InputFiles(None, (), dependency.directory)
        else:
            root = cache.local_dir(dependency)
            inputs[label] = InputFiles(
                root, tuple(root / item.path for item in dependency.manifest.files), dependency.directory
            )
    return inputs


def _pinned_files(label: str, dependency: Outputs, reads_urls: bool) -> InputFiles:
    """An external artifact, read where it lives: a local directory's files in place; a
    bucket through its URL, by a rule that reads URLs (nothing is copied)."""
    if not dependency.directory.startswith("gs://"):
        root = Path(dependency.directory)
        return InputFiles(root, tuple(sorted(path for path in root.rglob("*") if path.is_file())), str(root))
    if not reads_urls:
        raise StepFailed(
            f"{label} is an external artifact at {dependency.directory}, read in place: "
            "only a rule that reads URLs (reads_urls) can take it as an input"
        )
    return InputFiles(None, (), dependency.directory)


class LocalExecutor(Executor):
    def run(
        self, target: Target, context: Context, dependencies: Dependencies, placed: Placed | None = None
    ) -> Uploaded | None:
        if target.rule.execution is Execution.SUBPROCESS:
            run_in_subprocess(target.rule.impl_path, context)
        else:
            target.rule.impl(context)
        return None


def run_in_subprocess(impl_path: str, context: Context) -> None:
    """Run the rule in `python -m marinbuild.actions.execution.worker`, relaying progress, measurements
    and kept states to publish.

    A worker killed by SIGKILL that the builder did not send (the kernel's OOM killer, a
    killed Ray worker taking its child along) is reported as WorkerLost."""
    request = json.dumps({"impl": impl_path, "context": context.to_json()})
    python_path = (os.environ if context.processes.env is None else context.processes.env).get("PYTHONPATH")
    error: str | None = None
    exit_status: int | None = None
    with (
        open(context.log_path, "ab") as log,
        context.processes.popen(
            [sys.executable, "-m", "marinbuild.actions.execution.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=context.tmp,
            text=True,
            extra_env={"PYTHONPATH": os.pathsep.join(filter(None, [str(context.workspace), python_path]))},
        ) as process,
    ):
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(request)
        process.stdin.close()
        for line in process.stdout:
            message = json.loads(line)
            if "progress" in message:
                context.progress(*message["progress"])
            elif "measured" in message:
                context.measure(**message["measured"])
            elif "checkpoint" in message:
                context.publish_checkpoint(message["checkpoint"]["step"], Path(message["checkpoint"]["directory"]))
            elif "error" in message:
                error, exit_status = message["error"], message.get("exit_status")
        returncode = context.processes.exit_status(process.wait())
    if returncode == -signal.SIGKILL and error is None and not context.processes.stopped:
        raise WorkerLost(f"the worker process was killed by signal {signal.Signals(-returncode).name}")
    if returncode != 0:
        raise StepFailed(
            error or f"worker process exited with status {returncode}", exit_status if error else returncode
        )
