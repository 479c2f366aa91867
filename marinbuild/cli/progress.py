"""Showing a build as it happens, as plain lines (logs, CI, pipes).

Output goes to stderr, so `--json` output on stdout stays machine-readable. The live
display for terminals (`cli/live.py`) builds on this and is the only user of rich, which
is imported only then: a no-op build should not pay for it.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from marinbuild.actions.bookkeeping.results import BuildResult, Status, TargetResult
from marinbuild.sizes import BYTES, human_size

_LOG_TAIL_LINES = 20
# Piped output shows a running step's progress (a training's step and loss, documents
# tokenized, bytes moved) at most this often, so that a long step is never silent.
PROGRESS_EVERY_S = 10.0


def _log_tail(log: Path | None) -> str:
    if log is None or not log.is_file():
        return ""
    lines = log.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
    return "\n".join("    | " + line for line in lines)


def progress_text(done: float, total: float | None, unit: str) -> str:
    """`60/120 steps, loss 5.432, 10,240 tokens/s`: a step's progress as the rule reports it.
    Progress counted in bytes (a unit of `B`, then what was done: `B uploaded`) reads in
    sizes: `1.5 MiB/10.0 MiB uploaded`."""
    amount, _, rest = unit.partition(" ")
    if amount == BYTES:
        sizes = f"{human_size(done)}/{human_size(total)}" if total else human_size(done)
        return f"{sizes} {rest}".strip()
    return (f"{done:g}/{total:g} {unit}" if total else f"{done:g} {unit}").strip()


def summary_line(result: BuildResult) -> str:
    counts = ", ".join(f"{count} {status}" for status, count in result.counts.items())
    return f"{len(result.results)} targets: {counts} in {result.elapsed_s:.2f}s"


class PlainReporter:
    """One line per event that matters; cached targets are only counted (there may be 10,000),
    but for those copied from a mirror in another region."""

    def __init__(self, stream: TextIO = sys.stderr):
        self.stream = stream
        self.total = 0
        self.finished = 0
        self._lock = threading.Lock()
        self._progress_shown: dict[str, float] = {}  # label -> when its progress was last printed

    def _print(self, text: str) -> None:
        with self._lock:
            self.stream.write(text + "\n")
            self.stream.flush()

    def build_started(self, total: int) -> None:
        self.total = total

    def step_started(self, label: str) -> None:
        self._print(f"[{self.finished}/{self.total}] running {label}")

    def step_progress(self, label: str, done: float, total: float | None, unit: str) -> None:
        """The first report of a step's progress, then one every PROGRESS_EVERY_S seconds."""
        now = time.monotonic()
        with self._lock:
            last = self._progress_shown.get(label)
            if last is not None and now - last < PROGRESS_EVERY_S:
                return
            self._progress_shown[label] = now
        self._print(f"    {label}: {progress_text(done, total, unit)}")

    def step_finished(self, result: TargetResult) -> None:
        self.finished += 1
        if result.status is Status.CACHED and result.reason is None:
            return  # a plain hit; one with a reason was copied from a mirror, which is worth a line
        line = f"[{self.finished}/{self.total}] {result.status.value} {result.label}"
        if result.status is Status.BUILT:
            line += f" ({result.duration_s:.2f}s)" + (f": {result.reason}" if result.reason else "")
        elif result.reason:
            line += f": {result.reason}"
        if result.status is Status.FAILED:
            line += f"\n    log: {result.log}\n{_log_tail(result.log)}"
        self._print(line)

    def step_log(self, label: str, line: str) -> None:
        self._print(f"    {label} | {line}")

    def warning(self, message: str) -> None:
        self._print(f"WARNING: {message}")

    def build_finished(self, result: BuildResult) -> None:
        self._print(summary_line(result))


class PlanReporter(PlainReporter):
    """A dry run's: its plan, a line a target, is its result and goes to stdout
    (`build --dry-run`), so stderr shows each target's line no second time, only the
    warnings and the counts."""

    def step_finished(self, result: TargetResult) -> None:
        self.finished += 1
