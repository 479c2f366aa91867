"""Moving bytes to and from a remote store: progress reports, deadlines kept away while
bytes move, and downloads hashed as they land.

Kept apart from `remote.py` so that a build on a local store, which transfers nothing,
imports none of this machinery (fsspec's callbacks, an event loop).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any

import blake3

from marinbuild.hashing import digest_file
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


# Bytes a download writes between two catch-ups of its digest.
_CATCH_UP_BYTES = 8 << 20
_READ_BYTES = 256 << 10

# One thread hashes what downloads write, so that fsspec's event loop, which calls
# `TailDigest.advance` back, goes on receiving bytes meanwhile.
_hashing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="marinbuild-hash")


class TailDigest:
    """The BLAKE3 of a file that a download is writing, read back chunk by chunk as the
    download reports each one (the bytes are hot in the page cache), on the hashing thread:
    the digest is ready when the last byte lands, with no second pass over the file. A
    download that starts the file again (a retry truncates it) starts the digest again."""

    def __init__(self, path: str):
        self.path = path
        self.hasher = blake3.blake3()
        self.handle: Any = None
        self.offset = 0
        self._pending: Future[None] | None = None  # a catch-up queued and not yet started
        self._queued_at = 0  # bytes written when the last catch-up was queued
        self._lock = threading.Lock()  # guards _pending
        self._reading = threading.Lock()  # one reader of the file at a time
        self._finished = False

    def advance(self, written: int) -> None:
        """The download has written `written` bytes so far: queue a catch-up once a batch
        has come in since the last (one at a time: a catch-up reads to the end, so a second
        queued behind it would find nothing new). Chunks arrive 128 KiB at a time, and a
        catch-up for each cost more than the hashing itself."""
        if self._queued_at <= written < self._queued_at + _CATCH_UP_BYTES:
            return
        with self._lock:
            self._queued_at = written
            if self._pending is None:
                self._pending = _hashing.submit(self._catch_up)

    def _catch_up(self) -> None:
        with self._lock:
            self._pending = None
        with self._reading:
            if not self._finished:
                self._read_to_end()

    def _read_to_end(self) -> None:
        if self.handle is None:
            try:
                self.handle = open(self.path, "rb")  # noqa: SIM115 - closed by finish
            except FileNotFoundError:
                return  # not created yet
        written = os.fstat(self.handle.fileno()).st_size
        if written < self.offset:
            self.hasher, self.offset = blake3.blake3(), 0
            self.handle.seek(0)
        # Read what the file held when this began (what lands meanwhile is the next
        # catch-up's) into one buffer, small enough to stay in the CPU's cache while it is
        # hashed (a new megabyte per read cost more, allocation and page faults, than
        # hashing it), and no larger than what there is: a download of many files holds a
        # digest per file until the last lands, and none holds a buffer between catch-ups.
        buffer = memoryview(bytearray(min(_READ_BYTES, written - self.offset)))
        while self.offset < written and (size := self.handle.readinto(buffer[: written - self.offset])):
            self.hasher.update(buffer[:size])
            self.offset += size

    def finish(self) -> str:
        """The digest, once the download has written the whole file (read here, in the
        caller's thread: what the hashing thread has not reached yet)."""
        with self._reading:
            self._read_to_end()
            self._finished = True
            if self.handle is None:
                return digest_file(self.path)
            self.handle.close()
            return self.hasher.hexdigest()


def transfer_callback(verb: str, total_bytes: int, digests: dict[str, TailDigest] | None = None) -> Any:
    """An fsspec callback for a batch transfer: bytes moving keep the operation's deadline
    away (`deadlines`), are reported to this thread's progress function if it has one,
    and — for a download given `digests` — hashed as they land, into `digests[local path]`."""
    from fsspec.callbacks import Callback

    report = _transfer_progress.get()
    clock = deadlines.current()  # called back from fsspec's event loop thread: captured here

    class _File(Callback):
        def __init__(self, batch: _Batch, tail: TailDigest | None):
            super().__init__()
            self.batch, self.tail = batch, tail

        def call(self, *args: Any, **kwargs: Any) -> None:
            if self.tail is not None:
                self.tail.advance(self.value)
            self.batch.show()

    class _Batch(Callback):
        def __init__(self) -> None:
            super().__init__()
            self.files: list[_File] = []
            self.started = time.monotonic()
            self.lock = threading.Lock()

        def branched(self, path_1: str, path_2: str, **kwargs: Any) -> _File:
            tail = None
            if digests is not None:
                tail = digests[path_2] = TailDigest(path_2)
            child = _File(self, tail)
            with self.lock:
                self.files.append(child)
            return child

        def call(self, *args: Any, **kwargs: Any) -> None:
            self.show()

        def show(self) -> None:
            if clock is not None:
                clock.progressed()
            if report is None:
                return
            with self.lock:
                done = sum(child.value for child in self.files)
            rate = done / max(time.monotonic() - self.started, 1e-3) / 2**20
            report(done / 2**20, total_bytes / 2**20, f"MiB {verb} ({self.value}/{self.size} files, {rate:.0f} MiB/s)")

    return _Batch()
