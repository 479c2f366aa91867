"""`ctx`: everything a rule implementation may use while it runs.

The context is deliberately small: resolved attributes, the files of each input, a fresh
output directory, a logger that writes to the step's log in the store, and a progress
callback, `measure()` for facts about the attempt (timing) that are kept apart from
the output, and `warn()` for what the person building should know of it. It is
JSON-serializable (less the logger and callback), so the same object is rebuilt inside a
worker process for rules that run in a subprocess.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.targets.attrs import JsonValue
from marinbuild.targets.shards import ShardResult, ShardUnit

ProgressFn = Callable[[float, "float | None", str], None]
# Publishes a kept state of the running step: its step, and the directory holding its files.
CheckpointFn = Callable[[int, Path], None]
# Runs the units of the step running now (`map_shards`): given the driver's context, the
# unit function ("module:function") and the units; their results in the same order.
ShardFn = Callable[["Context", str, Sequence[ShardUnit]], list[ShardResult]]
# Among what an attempt measured, the warnings it gave (`Context.warn`), which the build prints.
WARNINGS = "warnings"


class StepFailed(Exception):
    """Raised by a rule implementation for an expected failure: the message is shown, not a traceback.

    `exit_status` is the status of the command that failed, when a command did; it is
    kept in the attempt record."""

    def __init__(self, message: str, exit_status: int | None = None):
        super().__init__(message)
        self.exit_status = exit_status


class ChildProcesses:
    """The processes a running step starts, each in a process group of its own, so that
    the builder can stop the step (interrupted, timed out, its lease taken over) by
    killing their groups, whatever they started in turn; once stopped, no new one starts.

    `env` is the step's environment (None: this process's own, inside a worker that
    already has the step's); `prefix` a command every process runs under (the sandbox)."""

    def __init__(self, env: dict[str, str] | None = None, prefix: list[str] | None = None) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self.stopped = False
        self.env = env
        self.prefix = prefix or []

    @contextmanager
    def popen(
        self, args: list[str], extra_env: dict[str, str] | None = None, **kwargs: Any
    ) -> Iterator[subprocess.Popen]:
        """Start `args` with the step's environment plus `extra_env`."""
        env = {**(os.environ if self.env is None else self.env), **(extra_env or {})}
        with self._lock:
            if self.stopped:
                raise StepFailed("the step was stopped before it started a process")
            process = _start([*self.prefix, *args], env, kwargs)
            self._running.add(process)
        try:
            yield process
        finally:
            with self._lock:
                self._running.discard(process)
            if process.poll() is None:
                _kill_group(process)
            process.wait()

    def exit_status(self, returncode: int) -> int:
        """A process's exit status as Popen reports it (-N: killed by signal N), also for
        one run under the sandbox, whose bubblewrap exits with 128+N instead."""
        if self.prefix and returncode > 128:
            return -(returncode - 128)
        return returncode

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            for process in self._running:
                _kill_group(process)


_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded before any fork: the child only calls it


def die_with_parent() -> None:
    """In the child, before it runs the step's command: the kernel kills it when the
    builder's thread that started it dies, so a builder killed outright (SIGKILL, out of
    memory) leaves no step running on its own. (Its own session keeps it out of the
    terminal's Ctrl-C, which the builder handles.)"""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _start(args: list[str], env: dict[str, str], kwargs: dict[str, Any]) -> subprocess.Popen:
    """Start `args` in a session of its own, killed with the builder's thread that started it.

    Through `setpriv --pdeathsig` where it can: Python then starts the process with vfork,
    whose cost stays the same however large the builder grows. A `preexec_fn` forces a full
    fork instead, which copies the builder's page tables: 35 ms a process at 800 MB, the
    per-action cost that made a cold build of 100,000 targets 2.5 times slower per action
    than one of 10,000 (docs/benchmarks.md, "Graphs of 100,000 targets")."""
    setpriv = _setpriv()
    if setpriv is None:
        return subprocess.Popen(args, env=env, start_new_session=True, preexec_fn=die_with_parent, **kwargs)
    return subprocess.Popen([setpriv, "--pdeathsig", "KILL", "--", *args], env=env, start_new_session=True, **kwargs)


@functools.cache
def _setpriv() -> str | None:
    """util-linux's `setpriv`, if this machine's can set the death signal (2.33 and later)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    probe = subprocess.run([setpriv, "--pdeathsig", "KILL", "--", "true"], capture_output=True, check=False)
    return setpriv if probe.returncode == 0 else None


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


@dataclass(frozen=True)
class InputFiles:
    """What one input label provides: a root (output directory or source file) and its
    files, and its `url` in the store. `root` is None when the input was not downloaded
    (a `reads_urls` rule on a remote store): the step reads it through the URL."""

    root: Path | None
    files: tuple[Path, ...]
    url: str

    def local(self, label: str) -> InputFiles:
        if self.root is None:
            raise StepFailed(
                f"{label} was not downloaded, because this rule declares reads_urls: "
                f"read it at ctx.url({label!r}) = {self.url}"
            )
        return self

    def single(self, label: str) -> Path:
        if len(self.files) != 1:
            raise ValueError(f"{label} provides {len(self.files)} files where exactly one is expected")
        return self.files[0]


@dataclass
class Context:
    label: str
    key: str
    attrs: dict[str, JsonValue]
    inputs: dict[str, InputFiles]
    out: Path
    tmp: Path
    log_path: Path
    workspace: Path
    scratch: Path | None = None
    # For a multi-host step, this process's part: {"coordinator": "host:port",
    # "num_processes": N, "process_id": i} (JAX distributed); None on one host.
    distributed: dict[str, Any] | None = None
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("marinbuild.step"))
    progress_fn: ProgressFn | None = None
    checkpoint_fn: CheckpointFn | None = None
    shard_fn: ShardFn | None = None
    processes: ChildProcesses = field(default_factory=ChildProcesses)
    measured: dict[str, JsonValue] = field(default_factory=dict)
    # The keys of the units this step mapped (`map_shards`): its entry names them, so that
    # `cache gc` keeps them as long as it keeps the step.
    shard_keys: list[str] = field(default_factory=list)

    def files(self, label: str) -> tuple[Path, ...]:
        return self.inputs[label].local(label).files

    def root(self, label: str) -> Path:
        """The local directory of an input (or the source file itself)."""
        root = self.inputs[label].local(label).root
        assert root is not None
        return root

    def url(self, label: str) -> str:
        """Where an input lives in the store (`gs://...` on GCS, a local path on a local
        store), for code that reads storage directly (fsspec, tensorstore, Levanter)."""
        return self.inputs[label].url

    def location(self, label: str) -> Path:
        """The single file a label provides (Bazel's `$(location)`)."""
        return self.inputs[label].local(label).single(label)

    def progress(self, done: float, total: float | None = None, unit: str = "") -> None:
        """Report progress on long work; shown live next to the running step. Counted in
        bytes (`unit` "B", or "B" and what was done: "B written"), it is shown in sizes."""
        if self.progress_fn is not None:
            self.progress_fn(done, total, unit)

    def publish_checkpoint(self, step: int, directory: Path) -> None:
        """Publish the state this step kept at `step` (a step its rule's `keeps_checkpoints`
        attribute lists) now, while the step goes on: the files of `directory`, laid out as
        the step also puts them under `checkpoint_dir(step)` of its output. Targets that
        read that state (`StepInput`) can then start before this step ends. On a Ray
        cluster the step's first host publishes it and tells the driver. Where it could not
        be published yet, it is published from the output when the step ends, with the same
        bytes; either way it then leaves the output, and lives in its entry only. (A run
        aside, `rerun --check`, publishes nothing: its output keeps them, to be compared.)"""
        if self.checkpoint_fn is not None:
            self.checkpoint_fn(step, directory)

    def map_shards(self, impl: str, units: Sequence[ShardUnit]) -> list[ShardResult]:
        """Run `impl` ("module:function", a function of a Context) once per unit, in
        parallel, each unit under a key of its own: those already published are not run
        again (targets/shards.py). Only a sharded rule's impl (`Rule.sharded`) may call it.
        Raises StepFailed naming the first unit that failed, once the units running then
        have ended (and been published: a rerun starts from them)."""
        if self.shard_fn is None:
            raise StepFailed("ctx.map_shards is for the impl of a sharded rule (Rule(sharded=True)), run by a build")
        results = self.shard_fn(self, impl, units)
        self.shard_keys.extend(result.key for result in results)
        return results

    def measure(self, **values: JsonValue) -> None:
        """Record facts about this attempt that must not be part of its output: wall time,
        throughput, the step it resumed from. They go into the attempt record and the
        entry's provenance. An output holds only what the recipe determines, so that two
        builds of one key publish the same tree and dependents keep their keys."""
        self.measured.update(values)

    def warn(self, message: str) -> None:
        """Warn the person building of something the step did not fail for but they should
        not miss (a cut that keeps none or all of the documents): the build prints
        `WARNING: LABEL: message` when the step ends, before the line saying how it ended,
        and its attempt keeps the message with what it measured (under WARNINGS), so that
        `log` and `show` say it again. Kept that way, it reaches the builder from a worker
        process or a cluster's host as `measure`'s values do."""
        self.measured[WARNINGS] = [*self.measured.get(WARNINGS, []), message]

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "key": self.key,
            "attrs": self.attrs,
            "inputs": {
                label: {
                    "root": None if files.root is None else str(files.root),
                    "files": [str(path) for path in files.files],
                    "url": files.url,
                }
                for label, files in self.inputs.items()
            },
            "out": str(self.out),
            "tmp": str(self.tmp),
            "log_path": str(self.log_path),
            "workspace": str(self.workspace),
            "scratch": None if self.scratch is None else str(self.scratch),
            "distributed": self.distributed,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Context:
        return cls(
            label=data["label"],
            key=data["key"],
            attrs=data["attrs"],
            inputs={
                label: InputFiles(
                    None if value["root"] is None else Path(value["root"]),
                    tuple(Path(path) for path in value["files"]),
                    value["url"],
                )
                for label, value in data["inputs"].items()
            },
            out=Path(data["out"]),
            tmp=Path(data["tmp"]),
            log_path=Path(data["log_path"]),
            workspace=Path(data["workspace"]),
            scratch=None if data["scratch"] is None else Path(data["scratch"]),
            distributed=data.get("distributed"),
        )
