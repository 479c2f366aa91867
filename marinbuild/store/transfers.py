"""Moving bytes to and from a remote store: progress reports, deadlines kept away while
bytes move, and downloads hashed as they stream in.

Kept apart from `remote.py` so that a build on a local store, which transfers nothing,
imports none of this machinery (fsspec's callbacks, an event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any

import blake3

from marinbuild.store import deadlines

# (done, total, unit), as a step reports its own progress.
TransferProgressFn = Callable[[float, "float | None", str], None]
_transfer_progress: ContextVar[TransferProgressFn | None] = ContextVar("marinbuild_transfer_progress", default=None)


@contextlib.contextmanager
def reporting_transfers(progress: TransferProgressFn) -> Iterator[None]:
    """Report the uploads and downloads this thread makes (MiB, files, rate) to `progress`."""
    token = _transfer_progress.set(progress)
    try:
        yield
    finally:
        _transfer_progress.reset(token)


# Bytes of a download gathered before they go to the hashing thread together: a hand-off
# per chunk of 256 KiB wakes the thread thousands of times per GiB, which cost more CPU
# than the hashing itself (a 1 GiB download from fake-gcs-server on 2 cores: batches of
# 4 MiB were the fastest of 1, 2, 4 and 8 MiB).
_HAND_OFF_BYTES = 4 << 20
# Bytes held for hashing, over all downloads (gathered, or handed off and not hashed yet),
# past which a download hands off what it has and waits for its own bytes to be hashed:
# one that outruns the hashing, or a hundred at once, must not hold their bytes in memory.
_HELD_BYTES = 64 << 20

# One thread hashes what downloads receive, so that the event loop receiving the bytes
# goes on receiving meanwhile (BLAKE3 lets go of the GIL while it hashes).
_hashing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="marinbuild-hash")


class _Held:
    """The bytes downloads hold for hashing (counted up by the event loop, down by the
    hashing thread)."""

    def __init__(self) -> None:
        self.bytes = 0
        self._lock = threading.Lock()

    def change(self, size: int) -> None:
        with self._lock:
            self.bytes += size


_held = _Held()


def _hash(hasher: Any, chunks: list[bytes]) -> None:
    for chunk in chunks:
        hasher.update(chunk)


class StreamDigest:
    """The BLAKE3 of a download, from its bytes in memory as they arrive: no second pass
    over the file, and no reading back what was just written. Batches go to the hashing
    thread; what is left at the end (all of a small file) is hashed in place. Used as a
    context manager: a download that fails or is cancelled lets go of what it held."""

    def __init__(self) -> None:
        self._hasher = blake3.blake3()
        self._batch: list[bytes] = []
        self._batched = 0
        self._behind: deque[Future[None]] = deque()

    def __enter__(self) -> StreamDigest:
        return self

    def __exit__(self, *exc_info: object) -> None:
        _held.change(-self._batched)  # bytes handed off are counted down once hashed
        self._batch, self._batched = [], 0

    async def add(self, chunk: bytes) -> None:
        """Called on the event loop that receives the download, chunk by chunk, in order."""
        self._batch.append(chunk)
        self._batched += len(chunk)
        _held.change(len(chunk))
        if self._batched >= _HAND_OFF_BYTES or _held.bytes > _HELD_BYTES:
            self._hand_off()
        while self._behind and (self._behind[0].done() or _held.bytes > _HELD_BYTES):
            await asyncio.wrap_future(self._behind.popleft())

    def _hand_off(self) -> None:
        size = self._batched
        hashed = _hashing.submit(_hash, self._hasher, self._batch)
        hashed.add_done_callback(lambda _: _held.change(-size))  # hashed, or cancelled with its download
        self._behind.append(hashed)
        self._batch, self._batched = [], 0

    async def hexdigest(self) -> str:
        """The digest of every chunk added, once the hashing thread has caught up."""
        while self._behind:
            await asyncio.wrap_future(self._behind.popleft())
        _hash(self._hasher, self._batch)
        return self._hasher.hexdigest()


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
            rate = self.done / max(time.monotonic() - self.started, 1e-3) / 2**20
            report(
                self.done / 2**20, total_bytes / 2**20, f"MiB {verb} ({self.value}/{self.size} files, {rate:.0f} MiB/s)"
            )

    return _Batch()
