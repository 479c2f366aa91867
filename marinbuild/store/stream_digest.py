"""The BLAKE3 of a download computed as its bytes stream in (the GCS store's downloads):
no second pass over the file. Its own module, as it needs an event loop (`asyncio`),
which a build on a local store never imports.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import blake3

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
