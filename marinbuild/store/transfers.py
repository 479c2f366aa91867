"""Moving bytes to and from a remote store: progress reports, and deadlines kept away
while bytes move.

Kept apart from `remote.py` so that a build on a local store, which transfers nothing,
imports none of this machinery (fsspec's callbacks, an event loop).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from marinbuild.sizes import BYTES, human_size
from marinbuild.store import deadlines

# (done, total, unit), as a step reports its own progress.
TransferProgressFn = Callable[[float, "float | None", str], None]
_transfer_progress: ContextVar[TransferProgressFn | None] = ContextVar("marinbuild_transfer_progress", default=None)


@contextlib.contextmanager
def reporting_transfers(progress: TransferProgressFn) -> Iterator[None]:
    """Report the uploads and downloads this thread makes (bytes, files, rate) to `progress`."""
    token = _transfer_progress.set(progress)
    try:
        yield
    finally:
        _transfer_progress.reset(token)


def transfer_callback(verb: str, total_bytes: int) -> Any:
    """An fsspec callback for a batch transfer: bytes moving keep the operation's deadline
    away (`deadlines`), and are reported to this thread's progress function if it has one.
    Made inside the operation it reports on (it captures the operation's clock)."""
    from fsspec.callbacks import Callback

    report = _transfer_progress.get()
    clock = deadlines.current()  # called back from fsspec's event loop thread: captured here

    class _File(Callback):
        def __init__(self, batch: _Batch):
            super().__init__()
            self.batch = batch
            self.counted = 0  # of this file's bytes, those in the batch's total

        def call(self, *args: Any, **kwargs: Any) -> None:
            with self.batch.lock:
                self.batch.done += self.value - self.counted
                self.counted = self.value
            self.batch.show()

    class _Batch(Callback):
        def __init__(self) -> None:
            super().__init__()
            self.done = 0  # bytes moved, over all files (kept as they move: a sum per report
            # over 10,000 files would make a many-file transfer quadratic)
            self.started = time.monotonic()
            self.lock = threading.Lock()

        def branched(self, path_1: str, path_2: str, **kwargs: Any) -> _File:
            return _File(self)

        def call(self, *args: Any, **kwargs: Any) -> None:
            self.show()

        def show(self) -> None:
            if clock is not None:
                clock.progressed()
            if report is None:
                return
            rate = self.done / max(time.monotonic() - self.started, 1e-3)
            report(self.done, total_bytes, f"{BYTES} {verb} ({self.value}/{self.size} files, {human_size(rate)}/s)")

    return _Batch()
