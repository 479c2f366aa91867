"""Content digests (BLAKE3) and the stat cache that makes them cheap to repeat.

BLAKE3 is several times faster than MD5 or SHA-256 and parallel within a file, which
matters when inputs are multi-gigabyte shards. The stat cache remembers, per path,
(size, mtime, inode, ctime) -> digest, so an unchanged file is never read twice; it is
also what lets every read of a local store be verified without rehashing everything.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import time
from pathlib import Path
from stat import S_ISREG
from typing import Any

import blake3

from marinbuild.memo import Memo

# Files larger than this are hashed with all cores (memory-mapped); smaller ones are not
# worth the thread start-up.
_PARALLEL_THRESHOLD = 16 * 1024 * 1024
_CHUNK = 1024 * 1024
# A file modified this close to when its digest was recorded might have changed again
# within the filesystem's timestamp granularity (Git's "racy clean" problem): never trust it.
RACY_NS = 2_000_000_000


# Made once: `json.dumps` with options builds a new encoder each call, and a no-op build
# serialises a recipe per target.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """The one serialization used for anything that is hashed: sorted, compact, strict."""
    return _CANONICAL.encode(value)


def digest_bytes(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def digest_json(value: Any) -> str:
    """The digest of a JSON value's canonical form: how keys, tree digests and other
    identities are made, so that whoever holds the value can check the digest."""
    return digest_bytes(canonical_json(value).encode())


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


def file_signature(stat: os.stat_result) -> tuple[int, int, int, int]:
    """What says a file (or directory) is unchanged: its size, mtime, ctime and inode."""
    return (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)


def settled(stat: os.stat_result, seen_ns: int) -> bool:
    """Whether a signature taken at `seen_ns` can be trusted later: the file was last modified
    more than the filesystem's timestamp granularity before, so a write right after it was
    seen would have changed its mtime (Git's "racy clean" rule)."""
    return stat.st_mtime_ns < seen_ns - RACY_NS


def clock_mark(path: Path) -> None:
    """Create `path` anew, its mtime the file system's own clock now: taken before files
    are hashed (`settled_below`), so that a file modified earlier than the mark is known to
    have been modified before its hash began, whatever the file system's granularity.

    The mark is stamped a second time after a `stat` of it: where the kernel keeps
    multigrain timestamps (Linux 6.13+ on ext4, XFS, btrfs, tmpfs), a file changed again
    in the clock tick its time was looked at gets a fine-grained stamp, later than every
    stamp given before it, and every stamp given after it is at least as late. Outputs a
    step wrote in the tick it ended in are then older than the mark, not tied with it (and
    hashed again by the next build). Elsewhere the second stamp is the same coarse tick:
    no gain, no loss."""
    path.unlink(missing_ok=True)
    path.touch(exist_ok=False)
    os.stat(path)
    os.utime(path)


def settled_below(mark: Path) -> int | None:
    """The mtime of a `clock_mark` (None if there is none): a file whose mtime is strictly
    older was last modified before the mark was made, so any write after it, on the same
    file system, gives the file a later mtime. Its digest taken after the mark is then
    trusted at once, not only after the racy window (`RACY_NS`)."""
    try:
        stat = os.lstat(mark)
    except FileNotFoundError:
        return None
    return stat.st_mtime_ns if S_ISREG(stat.st_mode) else None


def _trusted(stat: os.stat_result, recorded_ns: int, mark_ns: int | None = None) -> bool:
    """Whether what was recorded of a file (or directory) of this unchanged signature at
    `recorded_ns` is trusted: settled then, or modified before the mark made before it was read."""
    return settled(stat, recorded_ns) or (mark_ns is not None and stat.st_mtime_ns < mark_ns)


class StatCache:
    """Path -> digest, trusted while the file's stat signature (size, mtime, ctime, inode)
    is unchanged and was not recorded within the filesystem's timestamp granularity (or
    the file was modified before a `clock_mark` made before it was hashed)."""

    def __init__(self, memo: Memo):
        self._memo = memo

    def digest(self, path: str | Path) -> tuple[str, int]:
        """(digest, size) of a file, from the cache when its stat signature is unchanged."""
        key = str(path)
        stat = os.stat(key)
        cached = self._memo.get(key)
        if cached is not None and cached[0] == file_signature(stat) and _trusted(stat, *cached[2:]):
            return cached[1], stat.st_size
        digest = digest_file(path)
        self.record(path, digest, stat)
        return digest, stat.st_size

    def record(
        self, path: str | Path, digest: str, stat: os.stat_result | None = None, mark_ns: int | None = None
    ) -> None:
        """Remember a digest computed elsewhere (e.g. while publishing outputs); `mark_ns`:
        the `settled_below` of a clock mark made before it was computed, if any."""
        stat = stat or os.stat(path)
        signature = file_signature(stat)
        if mark_ns is not None and stat.st_mtime_ns < mark_ns:
            self._memo.put(str(path), (signature, digest, time.time_ns(), mark_ns))
        else:
            self._memo.put(str(path), (signature, digest, time.time_ns()))

    def listing_unchanged(self, root: str) -> bool:
        """Whether the directories of the tree at `root` hold the entries they held when
        `record_listing` last saw them: an entry added, removed or renamed changes its
        directory's mtime, so an unchanged signature of every directory (recorded outside
        the racy window, or older than the clock mark made before it was listed) spares
        listing them again."""
        cached = self._memo.get(root + "/")
        if cached is None:
            return False
        directories, *when = cached
        for relative, signature in directories:
            try:
                stat = os.stat(f"{root}/{relative}")
            except FileNotFoundError:
                return False
            if file_signature(stat) != signature or not _trusted(stat, *when):
                return False
        return True

    def record_listing(self, root: str, directories: list[str], mark_ns: int | None = None) -> None:
        """Remember the directories (relative to `root`, "" for itself) of a tree just listed;
        `mark_ns`: the `settled_below` of a clock mark made before it was listed, if any."""
        signatures = tuple((relative, file_signature(os.stat(f"{root}/{relative}"))) for relative in directories)
        self._memo.put(root + "/", (signatures, time.time_ns(), mark_ns))

    def save(self) -> None:
        self._memo.save()


@functools.cache
def _module_file(module: str) -> str | None:
    """A module's source file, found without importing it (rule modules import heavy
    libraries lazily, and finding their code must not import them)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not os.path.isfile(spec.origin):
        return None
    return spec.origin


def module_digest(module: str, stat_cache: StatCache) -> str:
    """The digest of a module's source file ("unknown" if it has none), through the stat
    cache: for a file unchanged since it was last hashed, a `stat`, not a read."""
    path = _module_file(module)
    return "unknown" if path is None else stat_cache.digest(path)[0]
