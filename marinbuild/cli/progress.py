"""Showing a build as it happens: a live rich display on a terminal, plain lines otherwise.

Both go to stderr, so `--json` output on stdout stays machine-readable.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from marinbuild.actions.results import BuildResult, Status, TargetResult

_LOG_TAIL_LINES = 20
_STYLE = {Status.BUILT: "green", Status.FAILED: "bold red", Status.SKIPPED: "yellow", Status.CACHED: "dim"}


def _log_tail(log: Path | None) -> str:
    if log is None or not log.is_file():
        return ""
    lines = log.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
    return "\n".join("    | " + line for line in lines)


def summary_line(result: BuildResult) -> str:
    counts = ", ".join(f"{count} {status}" for status, count in result.counts.items())
    return f"{len(result.results)} targets: {counts} in {result.elapsed_s:.2f}s"


class PlainReporter:
    """One line per event that matters; cached targets are only counted (there may be 10,000)."""

    def __init__(self, console: Console):
        self.console = console
        self.total = 0
        self.finished = 0
        self._lock = threading.Lock()

    def _print(self, text: str) -> None:
        with self._lock:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def build_started(self, total: int) -> None:
        self.total = total

    def step_started(self, label: str) -> None:
        self._print(f"[{self.finished}/{self.total}] running {label}")

    def step_progress(self, label: str, done: float, total: float | None, unit: str) -> None:
        pass

    def step_finished(self, result: TargetResult) -> None:
        self.finished += 1
        if result.status is Status.CACHED:
            return
        line = f"[{self.finished}/{self.total}] {result.status.value} {result.label}"
        if result.status is Status.BUILT:
            line += f" ({result.duration_s:.2f}s)"
        elif result.reason:
            line += f": {result.reason}"
        if result.status is Status.FAILED:
            line += f"\n    log: {result.log}\n{_log_tail(result.log)}"
        self._print(line)

    def warning(self, message: str) -> None:
        self._print(f"WARNING: {message}")

    def build_finished(self, result: BuildResult) -> None:
        self._print(summary_line(result))


class LiveReporter(PlainReporter):
    """A live panel: counts, elapsed time, and each running step with its progress."""

    def __init__(self, console: Console):
        super().__init__(console)
        self.started = time.monotonic()
        self.running: dict[str, tuple[float, str]] = {}
        self.counts = {status: 0 for status in Status}
        self.live = Live(console=console, get_renderable=self._render, refresh_per_second=8, transient=True)

    def _render(self) -> Group:
        with self._lock:
            counts = "  ".join(
                f"[{_STYLE.get(status, '')}]{status.value} {count}[/]" for status, count in self.counts.items() if count
            )
            header = Text.from_markup(
                f"[bold]{self.finished}/{self.total}[/]  running {len(self.running)}  {counts}  "
                f"[dim]{time.monotonic() - self.started:.1f}s[/]"
            )
            lines = [
                Text(f"  {label}  {time.monotonic() - since:.1f}s {progress}".rstrip())
                for label, (since, progress) in list(self.running.items())[:12]
            ]
        return Group(header, *lines)

    def _print(self, text: str) -> None:
        self.live.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def build_started(self, total: int) -> None:
        super().build_started(total)
        self.live.start()

    def step_started(self, label: str) -> None:
        with self._lock:
            self.running[label] = (time.monotonic(), "")

    def step_progress(self, label: str, done: float, total: float | None, unit: str) -> None:
        text = f"{done:g}/{total:g} {unit}" if total else f"{done:g} {unit}"
        with self._lock:
            if label in self.running:
                self.running[label] = (self.running[label][0], text.strip())

    def step_finished(self, result: TargetResult) -> None:
        with self._lock:
            self.running.pop(result.label, None)
            self.counts[result.status] += 1
        super().step_finished(result)

    def build_finished(self, result: BuildResult) -> None:
        self.live.stop()
        super().build_finished(result)
