"""The store interface: the few primitives the action cache is built on.

Kept narrow on purpose so that a GCS store (through gcsfs/fsspec) can implement it with
the object store's own guarantees: `create_only` is an exclusive create (locally a
hard link that fails if the name exists; on GCS `ifGenerationMatch=0`), and a lease is
what stops two machines running the same key at once.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Lease:
    """Held while a key runs. `lost` turns true if another runner took it over."""

    name: str
    lost: bool = False


class Store(abc.ABC):
    """A store rooted at `url`; every path argument is relative to that root."""

    url: str

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
    def delete(self, path: str) -> None:
        """Remove an object or a whole directory; absent is fine."""

    @abc.abstractmethod
    def staging_dir(self, path: str) -> Path:
        """A fresh local directory for a running attempt, cheap to publish from."""

    @abc.abstractmethod
    def put_dir(self, local: Path, path: str) -> None:
        """Publish a staged directory at `path`, replacing any leftover of a crashed attempt."""

    @abc.abstractmethod
    def put_file(self, local: Path, path: str) -> None:
        """Publish a staged file at `path` (the local copy may be consumed)."""

    @abc.abstractmethod
    def local_path(self, path: str) -> Path:
        """Where the bytes at `path` can be read as a local file."""

    @abc.abstractmethod
    def lease(self, name: str) -> contextlib.AbstractContextManager[Lease]:
        """Exclusive ownership of `name` among all builders sharing this store (blocks)."""
