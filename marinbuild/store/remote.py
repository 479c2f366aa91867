"""A store at any fsspec URL (s3://, az://, memory://, ...): the generic remote store.

What holds here depends on the backend, and is stated rather than assumed:

- objects are written whole (one PUT per object), so a reader never sees half an object,
  and an action-cache entry is created only after every output is uploaded and listed;
- `create_only` is check-then-write: two builders racing on the same key may both
  "win", which is harmless (both entries describe outputs of the same key, and every
  lookup verifies them) but means attempts can be duplicated;
- there are no leases: without preconditions two machines cannot exclude each other, so
  building refuses to start unless `--unsafe-no-locking` accepts that the same key may
  run on two machines at once.

The GCS store (`gcs.py`) closes these gaps with generation preconditions.

Every method that talks to the backend is one operation under the store's deadlines
(`deadlines.py`): tried again after transient failures, and given up with
StoreUnavailable once the store has not answered for the retry budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import shutil
import tempfile
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from marinbuild.errors import StoreError, StoreReadOnly
from marinbuild.hashing import digest_file
from marinbuild.store import deadlines
from marinbuild.store.base import Lease, ObjectStat, ScratchMirror, Signed, StoreSpec, TransferringStore, WaitingFn
from marinbuild.store.live_sync import RemoteScratch
from marinbuild.store.local_cache import LocalCache
from marinbuild.store.manifest import Manifest
from marinbuild.store.transfers import transfer_callback

_Method = TypeVar("_Method", bound=Callable[..., Any])


def _translating(writes: bool) -> Callable[[_Method], _Method]:
    def decorator(method: _Method) -> _Method:
        @functools.wraps(method)
        def wrapper(self: RemoteStore, *args: Any, **kwargs: Any) -> Any:
            if deadlines.current() is not None:
                return method(self, *args, **kwargs)
            try:
                return deadlines.call(self.policy, self.url, functools.partial(method, self, *args, **kwargs))
            except (FileNotFoundError, FileExistsError, StoreError):
                raise
            except self.backend_error_types as error:
                raise self.store_error(error, writes) from None

        return wrapper  # type: ignore[return-value]

    return decorator


# Make a method one operation under the store's deadlines (`deadlines.call`: transient
# failures tried again within the retry budget, then StoreUnavailable), and report the
# backend's other I/O failures (permission denied, a bad request) as StoreError naming
# the store's URL; absence and create-only conflicts stay Python's own errors. A method
# called by another one runs as part of the caller's operation: only the outermost
# retries and translates errors. `backend_writes` marks the methods that write, where a
# refusal (403) means the store is read-only for this account.
backend_errors = _translating(writes=False)
backend_writes = _translating(writes=True)


def _refused(error: BaseException) -> bool:
    """Whether the backend refused for lack of permission (gcsfs raises a 403 as an
    OSError "Forbidden: ...")."""
    return (
        isinstance(error, PermissionError) or str(error).startswith("Forbidden") or getattr(error, "code", None) == 403
    )


class RemoteStore(TransferringStore):
    """A store whose objects live behind fsspec. `machine_dir` is this machine's own space,
    never shared: `local_dir` under it holds this store's staging of running attempts,
    copies of logs and scratch; the local cache holds copies of outputs by digest."""

    exclusive_leases = False
    step_inputs_by_url = True
    scratch_is_shared = False
    lookup_concurrency = 32
    lists_signatures = True
    backend_error_types: tuple[type[BaseException], ...] = (OSError,)

    def __init__(self, url: str, machine_dir: Path, policy: deadlines.StorePolicy | None = None):
        self.url = url.rstrip("/")
        self.policy = policy or deadlines.StorePolicy.resolve()
        self.local_dir = machine_dir / "stores" / hashlib.sha256(self.url.encode()).hexdigest()[:16]
        self.local_cache = LocalCache(machine_dir / "local-cache")

    @functools.cached_property
    def fs(self) -> Any:
        import fsspec  # only remote stores pay for it

        return fsspec.core.url_to_fs(self.url)[0]

    @functools.cached_property
    def root(self) -> str:
        """The store's root as the filesystem names it (no protocol)."""
        return self.fs._strip_protocol(self.url).rstrip("/")

    @property
    def spec(self) -> StoreSpec:
        return StoreSpec(self.url, self.policy.timeout_s, self.policy.retry_budget_s)

    def _io(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """`fs.<name>(...)`, as one try of the current operation: on an async backend
        (gcsfs, s3fs, adlfs) it runs on fsspec's event loop and is cancelled when the
        operation's time is up; a blocking backend is only as bounded as it bounds itself."""
        fs = self.fs
        if not getattr(fs, "async_impl", False):
            return getattr(fs, name)(*args, **kwargs)
        coroutine = getattr(fs, f"_{name}")(*args, **kwargs)
        return deadlines.wait(asyncio.run_coroutine_threadsafe(coroutine, fs.loop))

    def store_error(self, error: BaseException, writing: bool = False) -> StoreError:
        if writing and _refused(error):
            return StoreReadOnly(
                f"the store {self.url} is read-only for this account: {str(error).splitlines()[0]}",
                hint="a fully cached build still works; to build, ask for write access or use a store you can write",
            )
        return StoreError(
            f"store {self.url} cannot be used: {error}",
            hint="check the URL, the network and your credentials; nothing local was changed",
        )

    def _full(self, path: str) -> str:
        return f"{self.root}/{path}" if path else self.root

    def _relative(self, full: str, prefix: str) -> str:
        return full[len(self._full(prefix)) + 1 :]

    def checksum(self, info: Mapping[str, Any]) -> str | None:
        """The content checksum the backend keeps for an object (none by default)."""
        return None

    def local_checksum(self, path: Path) -> str | None:
        """The same checksum of a local file, to verify an upload."""
        return None

    @backend_errors
    def read_bytes(self, path: str) -> bytes | None:
        try:
            return self._io("cat_file", self._full(path))
        except FileNotFoundError:
            return None

    @backend_writes
    def write_bytes(self, path: str, data: bytes) -> None:
        self._io("pipe_file", self._full(path), data)

    @backend_writes
    def create_only(self, path: str, data: bytes, metadata: Mapping[str, str] | None = None) -> bool:
        if self._io("exists", self._full(path)):
            return False
        self._io("pipe_file", self._full(path), data)
        return True

    @backend_errors
    def exists(self, path: str) -> bool:
        return self._io("exists", self._full(path))

    @backend_errors
    def signature(self, path: str) -> Hashable | None:
        try:
            info = self._io("info", self._full(path))
        except FileNotFoundError:
            return None
        return self._signature(info)

    def _version(self, info: Mapping[str, Any]) -> str | None:
        value = info.get("generation") or info.get("ETag") or info.get("mtime")
        return None if value is None else str(value)

    def _signature(self, info: Mapping[str, Any]) -> Hashable:
        """What changes whenever an object is replaced, from its metadata (or a listing's)."""
        return (info.get("size"), info.get("generation") or info.get("ETag") or info.get("mtime"), self.checksum(info))

    @backend_errors
    def signatures(self, prefix: str) -> dict[str, Signed]:
        return {
            self._relative(full, ""): Signed(self._signature(info), info.get("metadata") or {})
            for full, info in self._find(prefix).items()
        }

    @backend_errors
    def read_many(self, paths: Sequence[str]) -> dict[str, bytes]:
        by_full = {self._full(path): path for path in paths}
        if not by_full:
            return {}
        read = self._io("cat", list(by_full), on_error="return")  # a failure is a value, not raised
        return {by_full[full]: data for full, data in read.items() if isinstance(data, bytes)}

    @backend_errors
    def list(self, prefix: str) -> list[str]:
        return sorted(self._relative(full, "") for full in self._find(prefix))

    def _find(self, prefix: str) -> dict[str, dict[str, Any]]:
        self.fs.invalidate_cache()  # listings are cached by fsspec; other builders change the store
        try:
            return self._io("find", self._full(prefix), detail=True)
        except FileNotFoundError:
            return {}

    @backend_errors
    def stat_tree(self, prefix: str) -> dict[str, ObjectStat]:
        return {
            self._relative(full, prefix): ObjectStat(int(info["size"]), self.checksum(info), self._version(info))
            for full, info in self._find(prefix).items()
        }

    @backend_writes
    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._io("rm", self._full(path), recursive=True)

    def staging_dir(self, path: str) -> Path:
        directory = self.local_dir / path
        directory.mkdir(parents=True, exist_ok=False)
        return directory

    @backend_writes
    def put_dir(self, local: Path, path: str, manifest: Manifest) -> dict[str, str]:
        self.local_cache.adopt(local, manifest)  # built here: never downloaded again
        if self._find(path):
            self.delete(path)  # a crashed attempt's leftovers: no entry points at them
        files = [item.path for item in manifest.files]
        # The local checksums are computed while the bytes travel (a thread, not a pass after).
        with ThreadPoolExecutor(max_workers=1) as pool:
            local_checksums = pool.submit(lambda: {name: self.local_checksum(local / name) for name in files})
            if files:
                callback = transfer_callback("uploaded", manifest.total_bytes)
                self._io(
                    "put",
                    [str(local / name) for name in files],
                    [self._full(f"{path}/{name}") for name in files],
                    callback=callback,
                )
            sums = local_checksums.result()
        stored = self.stat_tree(path)
        checksums: dict[str, str] = {}
        for item in manifest.files:
            name = item.path
            expected = ObjectStat(item.size, sums[name])
            found = stored.get(name)
            if (
                found is None
                or found.size != expected.size
                or (expected.checksum and found.checksum != expected.checksum)
            ):
                raise StoreError(
                    f"upload of {self.location(f'{path}/{name}')} did not verify (stored {found}, local {expected})"
                )
            if found.checksum is not None:
                checksums[name] = found.checksum
        return checksums

    @backend_writes
    def put_file(self, local: Path, path: str) -> None:
        self._io("put_file", str(local), self._full(path))
        mirror = self.local_path(path)
        mirror.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(local, mirror)

    @backend_writes
    def put_files(self, files: Mapping[Path, str]) -> None:
        """Upload local files to objects (concurrently where the backend can), leaving the
        local files in place: for copies of something still in use (a running step's scratch)."""
        if files:
            callback = transfer_callback("uploaded", sum(local.stat().st_size for local in files))
            self._io(
                "put", [str(local) for local in files], [self._full(path) for path in files.values()], callback=callback
            )

    def get_files(
        self, files: Mapping[str, Path], total_bytes: int = 0, sizes: Mapping[str, int] | None = None
    ) -> dict[Path, str]:
        """Download objects to local files, concurrently where the backend can (`total_bytes`
        only serves the progress report). For files checked against a manifest, `sizes`
        gives each one's size there, and the BLAKE3 of each local file is returned (read back
        once downloaded here; the GCS store hashes the bytes as they stream in)."""
        if files:
            self._get(files, total_bytes)
        return {local: digest_file(local) for local in files.values()} if sizes is not None else {}

    @backend_errors
    def _get(self, files: Mapping[str, Path], total_bytes: int) -> None:
        callback = transfer_callback("downloaded", total_bytes)
        self._io(
            "get", [self._full(path) for path in files], [str(local) for local in files.values()], callback=callback
        )

    def outputs_dir(self, path: str, manifest: Manifest) -> Path:
        return self.local_cache.materialise(self, path, manifest)

    def verify_outputs(self, path: str, manifest: Manifest, checksums: dict[str, str]) -> str | None:
        """Nothing to ask: a look-up trusts a self-verifying entry (it names its key, its
        recipe hashes to it) without listing its outputs — a request per target would make
        a no-op build of a thousand cached targets a thousand round trips. The bytes are
        checked where they are read: a download is BLAKE3-verified (a damaged output is
        quarantined then, and rebuilt by the next build), and `cache verify` re-hashes all."""
        return None

    @contextlib.contextmanager
    def local_copies(self, path: str, names: list[str]) -> Iterator[dict[str, Path]]:
        with tempfile.TemporaryDirectory(prefix="marinbuild-copies-") as temporary:
            present = self.stat_tree(path)
            files = {name: Path(temporary, str(index)) for index, name in enumerate(names) if name in present}
            self.get_files({f"{path}/{name}": local for name, local in files.items()})
            yield files

    def scratch_mirror(self, key: str, local: Path) -> ScratchMirror:
        return RemoteScratch(self, key, local)

    def local_path(self, path: str) -> Path:
        return self.local_dir / path

    def location(self, path: str) -> str:
        return f"{self.url}/{path}"

    def lease_holder(self, name: str) -> str | None:
        return None  # there are no leases here

    @contextlib.contextmanager
    def lease(self, name: str, waiting: WaitingFn | None = None) -> Iterator[Lease]:
        """No exclusion at all: building on such a store needs `--unsafe-no-locking`."""
        yield Lease(name)
