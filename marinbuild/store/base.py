"""The store interface: the few primitives the action cache is built on, and the
capabilities callers ask of a store instead of asking which kind it is.

Kept narrow on purpose so that a GCS store (through gcsfs/fsspec) can implement it with
the object store's own guarantees: `create_only` is an exclusive create (locally a
hard link that fails if the name exists; on GCS `ifGenerationMatch=0`), and a lease is
what stops two machines running the same key at once.

A remote store (`remote.py`) cannot hand out its objects as local files: outputs are
checked through `stat_tree` (sizes and the server's own content checksums) and copied
into a local cache by digest only when a step must read them as files. Nothing outside
`marinbuild/store/` tells a local store from a remote one: it asks the capabilities
below (`outputs_dir`, `verify_outputs`, `step_inputs_by_url`, `scratch_is_shared`, ...).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from marinbuild.store import layout

if TYPE_CHECKING:
    from marinbuild.store.manifest import Manifest

WaitingFn = Callable[[str], None]


class MirrorLookup(Protocol):
    """Buckets in other regions holding copies of a store, asked for keys it lacks
    (`mirrors.Mirrors`): a protocol here, so that the action cache that holds one and the
    mirrors that read entries through it do not import each other."""

    def find(self, keys: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
        """The keys a mirror holds, verified there, and the problems found."""
        ...

    def hit(self, key: str) -> Any:
        """What an earlier look-up found for `key` (None: not found, or not asked)."""
        ...

    def outputs(self, hit: Any) -> Any:
        """A hit's outputs, read where they lie (a dry run's)."""
        ...

    def copy(self, hit: Any) -> Any:
        """Copy a hit into the local bucket; its outputs there."""
        ...


class ScratchMirror(Protocol):
    """A running step's scratch directory kept in the store, so that another machine can
    take the step over from its last checkpoint (`live_sync.RemoteScratch`)."""

    def restore(self) -> int:
        """Download the stored scratch if this machine has none; the number of files restored."""
        ...

    def sync(self) -> None:
        """Upload what changed in the local scratch since the last sync."""
        ...

    def discard(self) -> None:
        """The key is published: the stored scratch is of no further use."""
        ...


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
    version: str | None = None  # what changes when the object is rewritten (GCS: its generation)


@dataclass(frozen=True)
class Signed:
    """What a listing tells of one object without reading it: its `signature`, and the
    `metadata` it was created with (`create_only`), where the backend keeps any."""

    signature: Hashable
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StoreSpec:
    """What another process needs to open the same store (a Ray host): `open_store(spec)`.

    The deadlines of a remote store travel with it (`deadlines.StorePolicy`): seconds a
    request may go unanswered, and seconds an operation may keep failing before the build
    stops. None: the default, or its environment variable where that is set."""

    url: str
    timeout_s: float | None = None
    retry_budget_s: float | None = None


class Store(abc.ABC):
    """A store rooted at `url`; every path argument is relative to that root."""

    url: str
    exclusive_leases: bool = True  # False: `lease` excludes nobody (see remote.py)
    # True: a step whose rule reads URLs (`reads_urls`) reads its inputs where they are
    # stored, and nothing is copied to this machine for it. False: outputs already are
    # files of this machine.
    step_inputs_by_url: bool = False
    # True: `scratch_dir` lies inside the store, so every machine that mounts the store
    # sees the same scratch. False: it is this machine's own (mirrored by `scratch_mirror`).
    scratch_is_shared: bool = True
    # How many look-ups are worth sending at once (round trips to a remote store).
    lookup_concurrency: int = 1
    # True: one listing of many objects' signatures (`signatures`) is cheaper than asking
    # for each (a request per object on a remote store); False: a `stat` each is cheap.
    lists_signatures: bool = False

    @property
    def spec(self) -> StoreSpec:
        return StoreSpec(self.url)

    @abc.abstractmethod
    def read_bytes(self, path: str) -> bytes | None:
        """The object's bytes, or None if it does not exist."""

    @abc.abstractmethod
    def write_bytes(self, path: str, data: bytes) -> None:
        """Create or atomically replace an object (records that may be updated)."""

    @abc.abstractmethod
    def create_only(self, path: str, data: bytes, metadata: Mapping[str, str] | None = None) -> bool:
        """Create an object only if absent; False if it already existed. Never partial.

        `metadata`: a few strings that listings show beside the object (`signatures`),
        where the backend keeps any (GCS's custom metadata; others drop them). They are
        hints for a reader, who trusts only the object's bytes."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool: ...

    @abc.abstractmethod
    def signature(self, path: str) -> Hashable | None:
        """A value that changes whenever the object at `path` is replaced; None if absent.

        Lets a reader trust what it already verified without reading it again."""

    def signatures(self, prefix: str) -> dict[str, Signed]:
        """`signature` of every object under `prefix`, with its metadata, by path from the
        store's root, in one listing (a page of a thousand objects per request on GCS): for
        stores that say `lists_signatures`."""
        raise NotImplementedError(f"{type(self).__name__} does not list signatures")

    def read_many(self, paths: Sequence[str]) -> dict[str, bytes]:
        """The bytes of the objects at `paths`, all asked for at once (their round trips
        overlap), by path: for stores that say `lists_signatures`. An object absent, or
        whose read failed, is left out: whoever needs it reads it on its own."""
        raise NotImplementedError(f"{type(self).__name__} does not read many objects at once")

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
    def put_dir(self, local: Path, path: str, manifest: Manifest) -> dict[str, str]:
        """Publish a staged directory (already hashed into `manifest`) at `path`, replacing
        any leftover of a crashed attempt.

        Returns the backend's checksum of every file, verified against the local bytes
        ({} where the backend keeps none: a local store verifies with BLAKE3 instead)."""

    @abc.abstractmethod
    def outputs_dir(self, path: str, manifest: Manifest) -> Path:
        """The published files of `manifest` under `path` as a local directory (in place
        on a local store; a verified copy on this machine for a remote one)."""

    @abc.abstractmethod
    def verify_outputs(self, path: str, manifest: Manifest, checksums: dict[str, str]) -> str | None:
        """The first reason the files under `path` are not exactly `manifest`, or None.
        Cheap: a stat per file locally (through the stat cache), one listing remotely."""

    @abc.abstractmethod
    def local_copies(self, path: str, names: list[str]) -> contextlib.AbstractContextManager[dict[str, Path]]:
        """The files `names` under `path` as local files, for reading once (absent ones
        are left out): in place on a local store, downloaded to a temporary directory
        from a remote one."""

    def scratch_dir(self, key: str, shared_root: Path | None = None) -> Path:
        """The stable scratch directory of a resumable step's key on this machine (made).

        `shared_root`: a directory several machines mount (a multi-host step on a remote
        store), in which each store has its own space."""
        if shared_root is None:
            directory = self.local_path(layout.scratch(key))
        else:
            directory = shared_root / self.local_path("").name / layout.scratch(key)
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def scratch_mirror(self, key: str, local: Path) -> ScratchMirror | None:
        """What keeps a copy of a running step's scratch in the store, for a takeover on
        another machine; None where the scratch already lies in the store."""
        return None

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


class TransferringStore(Store):
    """A store whose objects are not files of this machine (`remote.py`): they are moved to
    and from it, many at a time. What fills the local cache and mirrors a step's scratch
    (`local_cache.py`, `live_sync.py`) asks only this of it, so neither imports the store."""

    @abc.abstractmethod
    def put_files(self, files: Mapping[Path, str]) -> None:
        """Upload local files to objects, leaving the local files in place."""

    @abc.abstractmethod
    def get_files(
        self, files: Mapping[str, Path], total_bytes: int = 0, sizes: Mapping[str, int] | None = None
    ) -> dict[Path, str]:
        """Download objects to local files; with `sizes` (files checked against a manifest),
        the BLAKE3 of each local file as it landed."""
