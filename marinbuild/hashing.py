"""Content digests (BLAKE3) and the stat cache that makes them cheap to repeat.

BLAKE3 is several times faster than MD5 or SHA-256 and parallel within a file, which
matters when inputs are multi-gigabyte shards. The stat cache remembers, per path,
(size, mtime, inode, ctime) -> digest, so an unchanged file is never read twice; it is
also what lets every read of a local store be verified without rehashing everything.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3

# Files larger than this are hashed with all cores (memory-mapped); smaller ones are not
# worth the thread start-up.
_PARALLEL_THRESHOLD = 16 * 1024 * 1024
_CHUNK = 1024 * 1024
# A file modified this close to when its digest was recorded might have changed again
# within the filesystem's timestamp granularity (Git's "racy clean" problem): never trust it.
_RACY_NS = 2_000_000_000


def canonical_json(value: Any) -> str:
    """The one serialization used for anything that is hashed: sorted, compact, strict."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def digest_bytes(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def digest_file(path: str | Path) -> str:
    size = os.stat(path).st_size
    if size >= _PARALLEL_THRESHOLD:
        hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
        hasher.update_mmap(path)
        return hasher.hexdigest()
    hasher = blake3.blake3()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


@dataclass(frozen=True)
class _Signature:
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int

    @classmethod
    def of(cls, stat: os.stat_result) -> _Signature:
        return cls(stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)


class StatCache:
    """Path -> digest, trusted while the file's stat signature is unchanged.

    Kept in SQLite in the workspace's machine-local state directory. Rows are read once
    and written back in one transaction by `save()`; concurrent builds merge safely.
    """

    def __init__(self, database: Path | None):
        self._database = database
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[_Signature, str, int]] = {}
        self._dirty: dict[str, tuple[_Signature, str, int]] = {}
        if database is not None and database.exists():
            with self._connect() as connection:
                for path, size, mtime, ctime, inode, digest, recorded in connection.execute("SELECT * FROM files"):
                    self._rows[path] = (_Signature(size, mtime, ctime, inode), digest, recorded)

    def _connect(self) -> sqlite3.Connection:
        assert self._database is not None
        self._database.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self._database, timeout=60)
        connection.execute(
            "CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER,"
            " ctime_ns INTEGER, inode INTEGER, digest TEXT, recorded_ns INTEGER)"
        )
        return connection

    def digest(self, path: str | Path) -> tuple[str, int]:
        """(digest, size) of a file, from the cache when its stat signature is unchanged."""
        key = str(path)
        stat = os.stat(key)
        signature = _Signature.of(stat)
        cached = self._rows.get(key)
        if cached is not None and cached[0] == signature and stat.st_mtime_ns < cached[2] - _RACY_NS:
            return cached[1], stat.st_size
        digest = digest_file(path)
        self.record(path, digest, stat)
        return digest, stat.st_size

    def record(self, path: str | Path, digest: str, stat: os.stat_result | None = None) -> None:
        """Remember a digest computed elsewhere (e.g. while publishing outputs)."""
        stat = stat or os.stat(path)
        row = (_Signature.of(stat), digest, time.time_ns())
        with self._lock:
            self._rows[str(path)] = row
            self._dirty[str(path)] = row

    def save(self) -> None:
        if self._database is None or not self._dirty:
            return
        with self._lock:
            dirty, self._dirty = self._dirty, {}
        with self._connect() as connection:
            connection.executemany(
                "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (path, sig.size, sig.mtime_ns, sig.ctime_ns, sig.inode, digest, recorded)
                    for path, (sig, digest, recorded) in dirty.items()
                ],
            )
