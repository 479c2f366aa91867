"""The engine of sharded steps: each unit of a step's work under a key of its own.

A sharded rule's impl, the driver, runs in the builder and hands its units to
`ctx.map_shards` (targets/shards.py). `ShardRunner.map` computes each unit's key
(`keys.shard_recipe`: the step's rule, the unit's function and parameters, and the
content digest of each file it reads, taken from its input's manifest), looks them all
up, and runs what the store lacks, up to `Executor.unit_slots` at once: each under its
key's lease, looked up again once the lease is held, recorded as an attempt labelled
`//pkg:step [unit name]` (a failed one too, with its log), run through `StepRun` by the
executor (a worker process here, a Ray task on a cluster), and published as an entry of
its own. A unit that fails fails the step, naming the unit, once the units running then
have ended; what they published stays, so the next build runs only the units left. A
step that is stopped (interrupted, timed out, its lease lost) stops its units.

The driver's own attempt is the scheduler's (running.py): it is the step's attempt, and
its entry names every unit it mapped, so that `cache gc` keeps them with it.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import shutil
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marinbuild.actions.analysis import keys
from marinbuild.actions.bookkeeping.machines import Machine, tally
from marinbuild.actions.execution.attempt import RunOutcome, StepRun, WorkerLost, utc_now
from marinbuild.actions.execution.executor import Dependencies, Executor, UnitInput, run_in_subprocess
from marinbuild.errors import OutputDamaged
from marinbuild.hashing import canonical_json, digest_file
from marinbuild.store import ActionCache, Attempt, AttemptStatus, Lease, Outputs
from marinbuild.store.manifest import FileEntry
from marinbuild.targets.context import Context, InputFiles, StepFailed
from marinbuild.targets.rule import Target
from marinbuild.targets.shards import ShardResult, ShardUnit

_POLL_S = 0.2  # how often the runner looks whether the step was stopped
_LOG_TAIL_LINES = 20  # of a failed unit's log, copied into the step's log
_LOOKUP_CHUNK = 256  # units whose entries are looked up together, as the runner reaches them
# What a unit's attempt record takes from its step's: who ran it, with what, where. (Not
# the machine the step's driver runs on, where the executor runs units elsewhere.)
_NOT_INHERITED = ("key", "label", "attempt", "status", "attrs", "inputs", "attempt_number", "started", "ran_on")


@dataclass(frozen=True)
class ShardStep:
    """What the units of one running step share: the step (its target, key and recipe),
    where and how its units run (`slots` at once), and its attempt's record, of which each
    unit's attempt keeps who ran it and with what. `aside` (`rerun --check`): every unit
    runs again, in a worker process here, recorded aside and never published."""

    target: Target
    key: str
    recipe: Mapping[str, Any]
    attempt: Mapping[str, Any]
    workspace: Path
    env: dict[str, str]
    sandbox: bool
    timeout_s: float | None
    slots: int
    aside: bool = False


def stored_files(
    cache: ActionCache, dependencies: Dependencies, inputs: Mapping[str, InputFiles]
) -> dict[str, UnitInput]:
    """Every input file of a step as a unit would read it, by its local path: an output
    file with its manifest's digest (no hashing); a source file, or a file of an external
    artifact in a local directory, through the stat cache (hashed once, however many units
    read it: a language model every shard's unit reads)."""
    found: dict[str, UnitInput] = {}
    for label, dependency in dependencies.items():
        files = inputs.get(label)
        if isinstance(dependency, Path):
            found[os.path.abspath(dependency)] = _local_input(cache, dependency)
        elif files is not None and files.root is not None and dependency.pinned:
            for path in files.files:
                found[os.path.abspath(path)] = _local_input(cache, path)
        elif files is not None and files.root is not None:
            for item in dependency.manifest.files:
                path = files.root / item.path
                found[os.path.abspath(path)] = UnitInput(path, item, dependency.key)
    return found


def _local_input(cache: ActionCache, path: Path) -> UnitInput:
    """A file no manifest lists, known by its content: a host elsewhere gets it as a blob."""
    digest, size = cache.stat_cache.digest(path)
    return UnitInput(path, FileEntry(path.name, digest, size), None)


@dataclass(frozen=True)
class _Unit:
    unit: ShardUnit
    key: str
    recipe: dict[str, Any]
    inputs: dict[str, UnitInput]


@dataclass(frozen=True)
class _Failed:
    """How a unit's run ended, if not with its outputs."""

    name: str
    outcome: RunOutcome
    attempt: str
    log_tail: str


class ShardRunner:
    """Runs the units of one step (`step`) through `executor`. `stored` are the step's
    input files (`stored_files`); `stop_reason` says whether, and why, the step was stopped."""

    def __init__(
        self,
        cache: ActionCache,
        executor: Executor,
        step: ShardStep,
        stored: Mapping[str, UnitInput],
        stop_reason: Callable[[], AttemptStatus | None],
    ):
        self.cache = cache
        self.executor = executor
        self.step = step
        self._stored = stored
        # Each published unit's outputs by their local root: a unit reading an earlier unit's
        # output (a reduce reading a map's) gets it by key, hashing nothing, fetched by key elsewhere.
        self._made: dict[str, tuple[str, Outputs]] = {}
        self._made_files: dict[str, dict[str, FileEntry]] = {}  # a root's files by path, once read
        self._stop_reason = stop_reason
        self._runs: set[StepRun] = set()
        self._lock = threading.Lock()
        self._stopped: AttemptStatus | None = None
        self._aside: list[Path] = []  # staging directories of units run aside, removed by `discard_aside`
        self._machines: Counter[Machine] = Counter()  # the units run elsewhere (Ray tasks), by node

    def map(self, context: Context, impl: str, units: Sequence[ShardUnit]) -> list[ShardResult]:
        """`ctx.map_shards` (context.py): the results of `units`, in their order."""
        if ":" not in impl:
            raise StepFailed(f"map_shards: the unit function {impl!r} is not 'module:function'")
        twice = [name for name, count in Counter(unit.name for unit in units).items() if count > 1]
        if twice:
            raise StepFailed(f"map_shards: two units are named {twice[0]!r}")
        if not self.step.aside:
            self.cache.list_entries(len(units))  # on a bucket: a listing, not a request per unit
        planned: list[_Unit] = []  # every unit with its key, in order, as the runner reaches it
        progress = _Progress(context, len(units))
        results, failed = self._run_all(impl, self._distinct(impl, units, planned, progress), progress)
        done = sum(unit.key in results for unit in planned)
        if failed is not None:
            raise self._failure(context, failed, done, len(units))
        if self._stopped is not None:
            raise StepFailed(f"the step was stopped with {len(units) - done} of its {len(units)} units not run")
        return [dataclasses.replace(results[unit.key], name=unit.unit.name) for unit in planned]

    def _distinct(
        self, impl: str, units: Sequence[ShardUnit], planned: list[_Unit], progress: _Progress
    ) -> Iterator[_Unit]:
        """Each unit with its key (added to `planned`), computed when the runner reaches it,
        not all before the first runs; a unit whose key came before is done with that one
        (units of one content run once)."""
        seen: set[str] = set()
        for unit in units:
            one = self._plan(impl, unit)
            planned.append(one)
            if one.key in seen:
                progress.finished()
            else:
                seen.add(one.key)
                yield one

    def discard_aside(self) -> None:
        """Remove what units run aside left (their outputs, compared through the step's)."""
        for root in self._aside:
            shutil.rmtree(root, ignore_errors=True)
        self._aside.clear()

    # -- one unit ----------------------------------------------------------------------

    def _plan(self, impl: str, unit: ShardUnit) -> _Unit:
        inputs = {role: self._input(unit, role, Path(path)) for role, path in unit.files.items()}
        try:
            canonical_json(dict(unit.attrs))
        except (TypeError, ValueError) as error:
            raise StepFailed(f"map_shards: the attrs of unit {unit.name} are not JSON values: {error}") from None
        digests = {role: item.entry.digest for role, item in inputs.items()}
        recipe = keys.shard_recipe(self.step.recipe, impl, unit.attrs, digests)
        return _Unit(unit, keys.action_key(recipe), recipe, inputs)

    def _input(self, unit: ShardUnit, role: str, path: Path) -> UnitInput:
        """An input of the step as its manifest has it; any other file (one the driver made,
        a reduce's result) is hashed, and travels to a remote host as a blob."""
        known = self._stored.get(os.path.abspath(path)) or self._made_file(path)
        if known is not None:
            return known
        if not path.is_file():
            raise StepFailed(f"map_shards: unit {unit.name} reads {path} as {role!r}, which is not a file")
        return UnitInput(path, FileEntry(path.name, digest_file(path), path.stat().st_size), None)

    def _made_file(self, path: Path) -> UnitInput | None:
        """`path` as a file of a unit this step published, if it is one (a root's files are
        looked at only when a later unit reads one of them)."""
        absolute = Path(os.path.abspath(path))
        for root in absolute.parents:
            made = self._made.get(str(root))
            if made is not None:
                key, outputs = made
                files = self._made_files.get(str(root))
                if files is None:
                    files = self._made_files[str(root)] = {item.path: item for item in outputs.manifest.files}
                entry = files.get(absolute.relative_to(root).as_posix())
                return None if entry is None else UnitInput(path, entry, key)
        return None

    @property
    def _step_label(self) -> str:
        return str(self.step.target.label)

    def _label(self, unit: _Unit) -> str:
        return f"{self._step_label} [{unit.unit.name}]"

    def _run_one(self, impl: str, unit: _Unit, found: Outputs | None, progress: _Progress) -> ShardResult | _Failed:
        """One unit: its published outputs if `found` (and readable), else run under its lease."""
        if found is not None:
            result = self._result(unit, found, ran=False)
            if result is not None:
                return result
        with self.cache.lease(unit.key) as lease:
            again = None if self.step.aside else self.cache.lookup(unit.key).outputs
            if again is not None:
                result = self._result(unit, again, ran=False)
                if result is not None:
                    return result
            return self._attempt(impl, unit, lease, progress)

    def _attempt(self, impl: str, unit: _Unit, lease: Lease, progress: _Progress) -> ShardResult | _Failed:
        """One attempt at a unit, under its lease: recorded, run, then published (or, aside,
        kept for the step's comparison)."""
        key = unit.key
        attempt = self.cache.start_attempt(key, self._label(unit), self._record(impl, unit), aside=self.step.aside)
        if not self.executor.runs_here and not self.step.aside:
            for item in unit.inputs.values():  # a file the step made: a host elsewhere reads it from the store
                if item.key is None:
                    self.cache.put_blob(attempt, item.path, item.entry.digest)
        started = time.monotonic()
        outcome = self._run(impl, unit, attempt, lease, progress)
        duration = round(time.monotonic() - started, 3)
        measured = {"measured": outcome.measured} if outcome.measured else {}
        if not outcome.succeeded:
            tail = _tail(attempt.staging.log)
            details = outcome.record()
            self.cache.finish_attempt(attempt, outcome.status, finished=utc_now(), duration_s=duration, **details)
            return _Failed(unit.unit.name, outcome, attempt.attempt_id, tail)
        if self.step.aside:
            self.cache.finish_attempt(
                attempt, AttemptStatus.SUCCEEDED, keep_staging=True, finished=utc_now(), duration_s=duration, **measured
            )
            self._aside.append(attempt.staging.root)
            assert outcome.manifest is not None
            names = tuple(item.path for item in outcome.manifest.files)
            return ShardResult(unit.unit.name, key, attempt.staging.out, names, ran=True)
        provenance = {**attempt.record, "finished": utc_now(), "duration_s": duration, **measured}
        provenance.pop("status", None)
        published = outcome.uploaded or outcome.manifest
        assert published is not None
        outputs = self.cache.publish(attempt, unit.recipe, provenance, published)
        self.cache.finish_attempt(attempt, AttemptStatus.SUCCEEDED, finished=utc_now(), duration_s=duration, **measured)
        result = self._result(unit, outputs, ran=True)
        if result is None:
            raise StepFailed(f"shard {unit.unit.name}: its outputs were damaged in the store as soon as published")
        return result

    def _record(self, impl: str, unit: _Unit) -> dict[str, Any]:
        """What a unit's attempt record holds: its step's who and with what, and its own
        shard, function, parameters and input digests."""
        inherited = {name: value for name, value in self.step.attempt.items() if name not in _NOT_INHERITED}
        here = self.executor.runs_here and "ran_on" in self.step.attempt
        return {
            **inherited,
            **({"ran_on": self.step.attempt["ran_on"]} if here else {}),
            "attempt_number": 1,
            "started": utc_now(),
            "shard_of": {"label": self._step_label, "key": self.step.key, "attempt": self.step.attempt.get("attempt")},
            "shard": unit.unit.name,
            "impl": impl,
            "attrs": dict(unit.unit.attrs),
            "inputs": {
                role: {"blake3": item.entry.digest, "size": item.entry.size} for role, item in unit.inputs.items()
            },
        }

    def _run(self, impl: str, unit: _Unit, attempt: Attempt, lease: Lease, progress: _Progress) -> RunOutcome:
        """Run a unit through its `StepRun`: by the executor, or in a worker process here when
        aside; stopped when its lease is lost or its step is stopped."""
        files = {role: InputFiles(item.path, (item.path,), str(item.path)) for role, item in unit.inputs.items()}
        run = StepRun(
            self._label(unit),
            unit.key,
            dict(unit.unit.attrs),
            attempt.staging,
            files,
            self.step.workspace,
            progress=functools.partial(progress.unit_progress, unit.key),
            env=self.step.env,
            sandbox=self.step.sandbox,
            timeout_s=self.step.timeout_s,
        )
        lease.on_lost = lambda: run.stop(AttemptStatus.LEASE_LOST)
        if lease.lost:
            run.stop(AttemptStatus.LEASE_LOST)
        self._track(run)
        try:
            if self.step.aside:
                return run.run(lambda context: run_in_subprocess(impl, context))
            placed = functools.partial(self._placed, attempt)
            return run.run(lambda context: self.executor.run_unit(self.step.target, impl, context, unit.inputs, placed))
        finally:
            with self._lock:
                self._runs.discard(run)

    def _placed(self, attempt: Attempt, machines: Sequence[Machine]) -> None:
        """A unit ran elsewhere (a Ray task): its record names the node, and the step's
        counts it (`ran_on`)."""
        attempt.record["ran_on"] = [machine.to_json() for machine in machines]
        with self._lock:
            self._machines.update(machines)

    @property
    def ran_on(self) -> list[Machine]:
        """The nodes this step's units ran on elsewhere, each once with how many (machines.py);
        empty where they ran here, on the step's own machine."""
        with self._lock:
            return tally(self._machines)

    def _result(self, unit: _Unit, outputs: Outputs, ran: bool) -> ShardResult | None:
        """The unit's outputs as local files; None if they turn out damaged (the entry is
        quarantined: the unit runs again)."""
        try:
            root = self.cache.local_dir(outputs)
        except OutputDamaged:
            return None
        if not self.step.aside:
            with self._lock:
                self._made[os.path.abspath(root)] = (unit.key, outputs)
        return ShardResult(unit.unit.name, unit.key, root, tuple(item.path for item in outputs.manifest.files), ran)

    # -- all units -----------------------------------------------------------------------

    def _run_all(
        self, impl: str, units: Iterator[_Unit], progress: _Progress
    ) -> tuple[dict[str, ShardResult], _Failed | None]:
        """Run `units`, `slots` at once; after the first failure no new one starts. Returns
        the results by key, and the failure.

        They are taken, and their entries looked up, `_LOOKUP_CHUNK` at a time as they are
        reached, not all before the first starts: the first unit of 100,000 then starts
        after one chunk's keys and look-ups (on a bucket, 100,000 round trips take
        minutes), and each later chunk is looked up while the units before it run."""
        results: dict[str, ShardResult] = {}
        failed: _Failed | None = None
        pending: deque[tuple[_Unit, Outputs | None]] = deque()
        running: dict[Future[ShardResult | _Failed], _Unit] = {}
        with ThreadPoolExecutor(max_workers=self.step.slots, thread_name_prefix="shard") as pool:
            try:
                while True:
                    while failed is None and self._stopped is None and len(running) < self.step.slots:
                        if not pending:
                            pending.extend(self._look_up(list(itertools.islice(units, _LOOKUP_CHUNK))))
                            if not pending:
                                break
                        unit, outputs = pending.popleft()
                        running[pool.submit(self._run_one, impl, unit, outputs, progress)] = unit
                    if not running:
                        break
                    done, _ = wait(running, timeout=_POLL_S, return_when=FIRST_COMPLETED)
                    reason = self._stop_reason()
                    if reason is not None:
                        self._stop_all(reason)
                    for future in done:
                        del running[future]
                        ended = future.result()
                        if isinstance(ended, _Failed):
                            failed = failed or ended
                        else:
                            results[ended.key] = ended
                            progress.finished()
            except BaseException:
                self._stop_all(AttemptStatus.CANCELLED)
                raise
        return results, failed

    def _look_up(self, units: list[_Unit]) -> list[tuple[_Unit, Outputs | None]]:
        """`units`, each with its published outputs where the store has them (none aside:
        every unit runs again)."""
        if self.step.aside or not units:
            return [(unit, None) for unit in units]
        looked_up = self.cache.lookup_many([unit.key for unit in units])
        return [(unit, lookup.outputs) for unit, lookup in zip(units, looked_up, strict=True)]

    def _failure(self, context: Context, failed: _Failed, done: int, total: int) -> Exception:
        """The step's error for a failed unit, its log's tail copied into the step's log."""
        outcome = failed.outcome
        context.log.error(
            "shard %s failed (attempt %s): %s\n%s", failed.name, failed.attempt, outcome.error, failed.log_tail
        )
        message = (
            f"shard {failed.name}: {outcome.error} ({done} of the step's {total} units done, kept for the next build)"
        )
        return WorkerLost(message) if outcome.retry_as == "worker_lost" else StepFailed(message, outcome.exit_status)

    def _track(self, run: StepRun) -> None:
        with self._lock:
            self._runs.add(run)
            if self._stopped is not None:
                run.stop(self._stopped)

    def _stop_all(self, reason: AttemptStatus) -> None:
        with self._lock:
            self._stopped = self._stopped or reason
            for run in self._runs:
                run.stop(self._stopped)


class _Progress:
    """A sharded step's progress: units done of all, and the documents (or whatever the
    units count in their own `ctx.progress`) of every unit run so far."""

    def __init__(self, context: Context, total: int):
        self._context = context
        self._total = total
        self._done = 0
        self._counted: dict[str, float] = {}  # unit key -> its latest count
        self._unit = ""
        self._lock = threading.Lock()

    def unit_progress(self, key: str, done: float, total: float | None, unit: str) -> None:
        with self._lock:
            self._counted[key] = done
            self._unit = self._unit or unit
            self._show()

    def finished(self) -> None:
        with self._lock:
            self._done += 1
            self._show()

    def _show(self) -> None:
        counted = sum(self._counted.values())
        text = f"shards, {counted:,.0f} {self._unit}".rstrip() if self._counted else "shards"
        self._context.progress(self._done, self._total, text)


def _tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
    except FileNotFoundError:
        return ""
    return "\n".join("    | " + line for line in lines)
