"""The live display of a build on a terminal: counts, elapsed time, running steps."""

from __future__ import annotations

import time

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from marinbuild.actions.bookkeeping.results import BuildResult, Status, TargetResult
from marinbuild.cli.progress import PlainReporter, progress_text

_STYLE = {Status.BUILT: "green", Status.FAILED: "bold red", Status.SKIPPED: "yellow", Status.CACHED: "dim"}


class LiveReporter(PlainReporter):
    """A live panel: counts, elapsed time, and each running step with its progress."""

    def __init__(self) -> None:
        super().__init__()
        console = Console(stderr=True, emoji=False, highlight=False)
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
        text = progress_text(done, total, unit)
        with self._lock:
            if label in self.running:
                self.running[label] = (self.running[label][0], text)

    def step_finished(self, result: TargetResult) -> None:
        with self._lock:
            self.running.pop(result.label, None)
            self.counts[result.status] += 1
        super().step_finished(result)

    def build_finished(self, result: BuildResult) -> None:
        self.live.stop()
        super().build_finished(result)
