"""The store interface: the few primitives the action cache is built on.

Kept narrow on purpose so that a GCS store (through gcsfs/fsspec) can implement it with
the object store's own guarantees: `create_only` is an exclusive create (locally a
hard link that fails if the name exists; on GCS `ifGenerationMatch=0`), and a lease is
what stops two machines running the same key at once.

A remote store (`remote.py`) cannot hand out its objects as local files: outputs are
checked through `stat_tree` (sizes and the server's own content checksums) and copied
into a local cache by digest only when a step must read them as files.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path

WaitingFn = Callable[[str], None]


@dataclass
class Lease:
    """Held while a key runs. `lost` turns true if another runner took it over, and
    `on_lost` (set by whoever runs the key) is called then, to stop the running action."""

    name: str
    lost: bool = False
    on_lost: Callable[[], None] | None = None

    def mark_lost(self) -> None:
        self.lost = True
        if self.on_lost is not None:
            self.on_lost()


@dataclass(frozen=True)
class ObjectStat:
    """What a listing tells of one stored object without reading it."""

    size: int
    checksum: str | None  # a content checksum kept by the backend (GCS: "crc32c:..."), if any


class Store(abc.ABC):
    """A store rooted at `url`; every path argument is relative to that root."""

    url: str
    exclusive_leases: bool = True  # False: `lease` excludes nobody (see remote.py)

    @abc.abstractmethod
    def read_bytes(self, path: str) -> bytes | None:
        """The object's bytes, or None if it does not exist."""

    @abc.abstractmethod
    def write_bytes(self, path: str, data: bytes) -> None:
        """Create or atomically replace an object (records that may be updated)."""

    @abc.abstractmethod
    def create_only(self, path: str, data: bytes) -> bool:
        """Create an object only if absent; False if it already existed. Never partial."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool: ...

    @abc.abstractmethod
    def signature(self, path: str) -> Hashable | None:
        """A value that changes whenever the object at `path` is replaced; None if absent.

        Lets a reader trust what it already verified without reading it again."""

    @abc.abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Paths of the objects under `prefix`, recursively."""

    @abc.abstractmethod
    def stat_tree(self, prefix: str) -> dict[str, ObjectStat]:
        """Every object under `prefix`, by path relative to it (one listing on a remote store)."""

    @abc.abstractmethod
    def delete(self, path: str) -> None:
        """Remove an object or a whole directory; absent is fine."""

    @abc.abstractmethod
    def staging_dir(self, path: str) -> Path:
        """A fresh local directory for a running attempt, cheap to publish from."""

    @abc.abstractmethod
    def put_dir(self, local: Path, path: str) -> dict[str, str]:
        """Publish a staged directory at `path`, replacing any leftover of a crashed attempt.

        Returns the backend's checksum of every file, verified against the local bytes
        ({} where the backend keeps none: a local store verifies with BLAKE3 instead)."""

    @abc.abstractmethod
    def put_file(self, local: Path, path: str) -> None:
        """Publish a staged file at `path` (the local copy may be consumed)."""

    @abc.abstractmethod
    def local_path(self, path: str) -> Path:
        """Where the bytes at `path` can be read as a local file (on a remote store: a
        machine-local directory that is not shared, e.g. for scratch and copies of logs)."""

    @abc.abstractmethod
    def location(self, path: str) -> str:
        """Where `path` is, for people and for steps that read it directly (a path or a URL)."""

    @abc.abstractmethod
    def lease_holder(self, name: str) -> str | None:
        """Who holds the lease `name` right now, or None (`cache gc` spares held keys)."""

    @abc.abstractmethod
    def lease(self, name: str, waiting: WaitingFn | None = None) -> contextlib.AbstractContextManager[Lease]:
        """Exclusive ownership of `name` among all builders sharing this store (blocks).

        `waiting` is told, now and then, who holds the lease while this builder waits."""
