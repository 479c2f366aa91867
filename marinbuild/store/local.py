"""A store in a local directory (the default: `cache/` in the workspace).

Atomicity comes from the filesystem: objects are written to a temporary name and
renamed; create-only objects are hard-linked into place, which fails if the name
exists; leases are `flock`s, which the kernel releases when a holder dies, so a
SIGKILLed build never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import shutil
import uuid
from collections.abc import Callable, Hashable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from marinbuild.errors import StoreError, StoreReadOnly
from marinbuild.hashing import StatCache, settled_below
from marinbuild.memo import Memo
from marinbuild.store.base import Lease, ObjectStat, Store, WaitingFn
from marinbuild.store.layout import STAGING_MARK
from marinbuild.store.manifest import Manifest


def _is_temporary(name: str) -> bool:
    """A temporary sibling `write_bytes` writes before renaming (`.NAME.UUID.tmp`)."""
    return name.startswith(".") and name.endswith(".tmp")


def _regular_files(root: str) -> tuple[set[str], str | None, list[str]]:
    """The regular files under `root` (relative names), the first entry that is neither a
    regular file nor a directory (a symlink, a device), if any, and the directories
    (relative, "" for `root`, each else ending in "/")."""
    found: set[str] = set()
    directories = [""]
    pending = [""]
    while pending:
        relative = pending.pop()
        try:
            entries = list(os.scandir(root + relative))
        except FileNotFoundError:
            continue
        for entry in entries:
            name = relative + entry.name
            if entry.is_dir(follow_symlinks=False):
                pending.append(name + "/")
                directories.append(name + "/")
            elif entry.is_file(follow_symlinks=False):
                found.add(name)
            else:
                return found, name, directories
    return found, None, directories


_Method = TypeVar("_Method", bound=Callable[..., Any])
_REFUSED = (errno.EROFS, errno.EACCES, errno.EPERM)


def _local_errors(method: _Method) -> _Method:
    """The file system's refusals as store errors naming the path, with a hint (a
    read-only store is `StoreReadOnly`); absence and create-only conflicts stay Python's
    own errors, which callers use."""

    @functools.wraps(method)
    def wrapper(self: LocalStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (FileNotFoundError, FileExistsError):
            raise
        except OSError as error:
            raise self.store_error(error) from None

    return wrapper  # type: ignore[return-value]


class LocalStore(Store):
    """`stat_cache` remembers the digests of published files, so that verifying an entry's
    outputs before each use costs a `stat()` per file, not a read."""

    def __init__(self, root: Path, stat_cache: StatCache | None = None):
        self.root = root
        self.url = str(root)
        self._prefix = str(root) + os.sep
        self.stat_cache = stat_cache or StatCache(Memo(None, "local-store"))
        if root.exists() and not root.is_dir():
            raise StoreError(
                f"the store {root} is a file, not a directory",
                hint="--store (or the 'store' setting) names a directory, created on first use, or a URL",
            )

    def store_error(self, error: OSError) -> StoreError:
        where = error.filename or self.url
        if error.errno in _REFUSED:
            return StoreReadOnly(
                f"the store {self.url} is read-only here: cannot write {where} ({error.strerror})",
                hint="a fully cached build still works; to build, use a store you can write (--store DIR)",
            )
        return StoreError(
            f"the store {self.url} cannot be used: {error.strerror}: {where}",
            hint="--store (or the 'store' setting) must name a directory this machine can create and write",
        )

    def _path(self, path: str) -> Path:
        return self.root / path

    def _temporary_sibling(self, target: Path) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        return target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")

    @_local_errors
    def read_bytes(self, path: str) -> bytes | None:
        try:
            with open(self._prefix + path, "rb") as file:  # plain strings: this is the no-op build's hot path
                return file.read()
        except FileNotFoundError:
            return None

    @_local_errors
    def write_bytes(self, path: str, data: bytes) -> None:
        target = self._path(path)
        temporary = self._temporary_sibling(target)
        temporary.write_bytes(data)
        os.replace(temporary, target)

    @_local_errors
    def create_only(self, path: str, data: bytes, metadata: Mapping[str, str] | None = None) -> bool:
        target = self._path(path)
        temporary = self._temporary_sibling(target)
        with open(temporary, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(temporary, target)
            return True
        except FileExistsError:
            return False
        finally:
            temporary.unlink()

    @_local_errors
    def exists(self, path: str) -> bool:
        return self._path(path).exists()

    @_local_errors
    def signature(self, path: str) -> Hashable | None:
        try:
            stat = os.stat(self._prefix + path)
        except FileNotFoundError:
            return None
        return (stat.st_size, stat.st_mtime_ns, stat.st_ino)

    @_local_errors
    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if base.is_file():
            return [prefix]
        found = []
        for directory, _subdirectories, files in os.walk(base):
            for name in files:
                if not _is_temporary(name):
                    found.append(Path(directory, name).relative_to(self.root).as_posix())
        return sorted(found)

    @_local_errors
    def stat_tree(self, prefix: str) -> dict[str, ObjectStat]:
        """Every object under `prefix`; a symlink is listed as what it is (never followed)."""
        base = self._path(prefix)
        found = {}
        for directory, subdirectories, files in os.walk(base):
            for name in [*files, *(name for name in subdirectories if Path(directory, name).is_symlink())]:
                if not _is_temporary(name):
                    path = Path(directory, name)
                    status = path.lstat()
                    found[path.relative_to(base).as_posix()] = ObjectStat(status.st_size, None, str(status.st_mtime_ns))
        return found

    @_local_errors
    def delete(self, path: str) -> None:
        target = self._path(path)
        if target.is_dir() and not target.is_symlink():
            # Rename first so a reader never sees a half-deleted directory under the real name.
            doomed = self._temporary_sibling(target)
            os.rename(target, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()

    @_local_errors
    def staging_dir(self, path: str) -> Path:
        directory = self._path(path)
        directory.mkdir(parents=True, exist_ok=False)
        return directory

    @_local_errors
    def put_dir(self, local: Path, path: str, manifest: Manifest) -> dict[str, str]:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            self.delete(path)
        os.rename(local, target)
        root = self._prefix + path + "/"  # as `verify_outputs` names it
        mark_ns = settled_below(local.parent / STAGING_MARK)  # a staging's `out`: see Staging.mark
        for item in manifest.files:
            self.stat_cache.record(root + item.path, item.digest, mark_ns=mark_ns)
        if mark_ns is not None:
            # Listed after the mark, as the files were hashed: the next look-up need not list
            # the tree again while no directory of it changed (`verify_outputs`).
            present, odd, directories = _regular_files(root)
            if odd is None and present == {item.path for item in manifest.files}:
                self.stat_cache.record_listing(root[:-1], directories, mark_ns)
        return {}

    def outputs_dir(self, path: str, manifest: Manifest) -> Path:
        return self._path(path)

    @_local_errors
    def verify_outputs(self, path: str, manifest: Manifest, checksums: dict[str, str]) -> str | None:
        """Every file of the manifest, checked through the stat cache (a `stat` each), and
        nothing else in the tree: listed again only when a directory of it changed."""
        root = self._prefix + path  # plain strings: this is the no-op build's hot path
        directories = None
        if not self.stat_cache.listing_unchanged(root):
            present, odd, directories = _regular_files(root + "/")
            if odd is not None:
                return f"output {odd} is not a regular file (a symlink or a device), which no step publishes"
            unlisted = present.difference(item.path for item in manifest.files)
            if unlisted:
                return f"output file {min(unlisted)} is not in the manifest (added after publishing)"
        prefix = root + "/"
        for item in manifest.files:
            try:
                digest, size = self.stat_cache.digest(prefix + item.path)
            except FileNotFoundError:
                return f"output file {item.path} is missing from the store"
            if size != item.size or digest != item.digest:
                return f"output file {item.path} does not match its manifest (corrupt)"
        if directories is not None:
            self.stat_cache.record_listing(root, directories)
        return None

    @contextlib.contextmanager
    def local_copies(self, path: str, names: list[str]) -> Iterator[dict[str, Path]]:
        root = self._path(path)
        yield {name: root / name for name in names if (root / name).is_file() and not (root / name).is_symlink()}

    @_local_errors
    def put_file(self, local: Path, path: str) -> None:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(local, target)

    def local_path(self, path: str) -> Path:
        return Path(self._prefix + path)

    def location(self, path: str) -> str:
        return self._prefix + path

    @_local_errors
    def lease_holder(self, name: str) -> str | None:
        path = self._path(name)
        if not path.exists():
            return None
        with open(path) as handle:  # read-only: a read-only store can still say who holds it
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return "a builder on this machine"
            fcntl.flock(handle, fcntl.LOCK_UN)
        return None

    @contextlib.contextmanager
    def lease(self, name: str, waiting: WaitingFn | None = None) -> Iterator[Lease]:
        """A `flock`: the kernel releases it when its holder dies and wakes the next waiter."""
        lock_file = self._path(name)
        try:
            lock_file.parent.mkdir(parents=True, exist_ok=True)
            handle = open(lock_file, "a")
        except OSError as error:
            raise self.store_error(error) from None
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if waiting is not None:
                    waiting("waiting for the lease: another builder on this machine holds it")
                fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield Lease(name)
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
