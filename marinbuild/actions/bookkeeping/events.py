"""The event stream of a build: one JSON object per line, the basis for dashboards.

It is a reporter like the progress display, so it sees exactly what the display sees:
the build starting, each step starting, progress (bytes moved by transfers), each
result (a cache hit is a step finished `cached`), warnings (waiting for a lease,
damaged entries), and the end. Lines are appended to `--events FILE` as they happen and
the stream is kept in the store next to the invocation record, less the plain cache
hits (which the record lists; a hit copied from a mirror in another region is kept). A
step that waits for another builder's lease shows as a `warning` event that says so,
followed by the holder's log lines as `step_log` events.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from marinbuild.actions.bookkeeping.results import BuildResult, NullReporter, Reporter, Status, TargetResult

# The event a finished step is, by its status (any other: step_finished).
_EVENT_OF_STATUS = {Status.CACHED: "cache_hit", Status.FAILED: "step_failed", Status.SKIPPED: "step_skipped"}


class EventStream:
    """Events as they happen, to `--events FILE` (each as one JSON line, cache hits too), and
    kept for the store, less the cache hits: the invocation record lists those already, and
    a no-op build of 10,000 targets should not pay for 10,000 events nobody asked for."""

    def __init__(self, path: Path | None = None):
        self._kept: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._file: TextIO | None = open(path, "a", encoding="utf-8") if path is not None else None  # noqa: SIM115 - closed in build_finished

    def _emit(self, event: str, **fields: Any) -> None:
        record = {"time": round(time.time(), 3), "event": event, **fields}
        with self._lock:
            if event != "cache_hit" or "reason" in fields:  # a hit with a reason: copied from a mirror
                self._kept.append(record)
            if self._file is not None:
                self._file.write(json.dumps(record) + "\n")
                self._file.flush()

    @property
    def jsonl(self) -> bytes:
        """The stream as the store keeps it (every event but the cache hits)."""
        with self._lock:
            return "".join(json.dumps(record) + "\n" for record in self._kept).encode()

    def build_started(self, total: int) -> None:
        self._emit("build_started", targets=total)

    def step_started(self, label: str) -> None:
        self._emit("step_started", label=label)

    def step_progress(self, label: str, done: float, total: float | None, unit: str) -> None:
        self._emit("step_progress", label=label, done=done, total=total, unit=unit)

    def step_finished(self, result: TargetResult) -> None:
        event = _EVENT_OF_STATUS.get(result.status, "step_finished")
        if event == "cache_hit" and self._file is None and result.reason is None:
            return  # kept nowhere: spare building it
        self._emit(event, **result.to_json())

    def step_log(self, label: str, line: str) -> None:
        self._emit("step_log", label=label, line=line)

    def warning(self, message: str) -> None:
        self._emit("warning", message=message)

    def build_finished(self, result: BuildResult) -> None:
        self._emit("build_finished", counts=result.counts, elapsed_s=round(result.elapsed_s, 3))
        if self._file is not None:
            self._file.close()
            self._file = None


class Tee:
    """Several reporters as one: the display and the event stream."""

    def __init__(self, *reporters: Reporter):
        self.reporters = reporters

    def build_started(self, total: int) -> None:
        for reporter in self.reporters:
            reporter.build_started(total)

    def step_started(self, label: str) -> None:
        for reporter in self.reporters:
            reporter.step_started(label)

    def step_progress(self, label: str, done: float, total: float | None, unit: str) -> None:
        for reporter in self.reporters:
            reporter.step_progress(label, done, total, unit)

    def step_finished(self, result: TargetResult) -> None:
        for reporter in self.reporters:
            reporter.step_finished(result)

    def step_log(self, label: str, line: str) -> None:
        for reporter in self.reporters:
            reporter.step_log(label, line)

    def warning(self, message: str) -> None:
        for reporter in self.reporters:
            reporter.warning(message)

    def build_finished(self, result: BuildResult) -> None:
        for reporter in self.reporters:
            reporter.build_finished(result)


class HitsRecorded(NullReporter):
    """Has the invocation record rewritten, still `running`, when a step starts after cache
    hits were found since it was last written. A build killed outright never writes its
    end, and `history` reads back only the steps it ran (from their attempts): the hits
    its record did not list would read `pending` for ever. Hits are mostly all found
    before the first step starts: that is one more write for a build that runs something,
    and none for a no-op."""

    def __init__(self) -> None:
        self.rewrite: Callable[[], None] = lambda: None  # set once the record can be written
        self._unrecorded = False

    def step_finished(self, result: TargetResult) -> None:
        if result.status is Status.CACHED:
            self._unrecorded = True

    def step_started(self, label: str) -> None:
        if self._unrecorded:
            self._unrecorded = False
            self.rewrite()
