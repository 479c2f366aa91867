"""The store: outputs by key, create-only action-cache entries, attempts, logs."""

from __future__ import annotations

import json
from pathlib import Path

from marinbuild.errors import StoreError
from marinbuild.hashing import StatCache
from marinbuild.store import layout
from marinbuild.store.action_cache import ActionCache
from marinbuild.store.base import Lease, ObjectStat, Store, StoreSpec
from marinbuild.store.deadlines import StorePolicy
from marinbuild.store.entries import (
    Attempt,
    AttemptStatus,
    CacheEntry,
    Outputs,
    attempt_id_time,
    new_attempt_id,
)
from marinbuild.store.local import LocalStore
from marinbuild.store.records import Records
from marinbuild.store.transfers import reporting_transfers
from marinbuild.store.url import parse_store_url, resolve_store_url

__all__ = [
    "ActionCache",
    "Attempt",
    "AttemptStatus",
    "CacheEntry",
    "Lease",
    "ObjectStat",
    "Outputs",
    "Records",
    "Store",
    "StoreSpec",
    "attempt_id_time",
    "new_attempt_id",
    "open_store",
    "parse_store_url",
    "reporting_transfers",
    "require_leases",
    "resolve_store_url",
    "store_salt",
]

STORE_FORMAT = 1


def open_store(spec: StoreSpec | str, machine_dir: Path, stat_cache: StatCache | None = None) -> Store:
    """Open the store at a URL. Opening writes nothing: a dry run leaves no trace.

    `machine_dir` is this machine's own space, never shared (for a remote store: staging,
    scratch, copies of outputs); `stat_cache` remembers digests of a local store's files.
    A remote store's requests follow the spec's deadlines (`deadlines.py`)."""
    spec = spec if isinstance(spec, StoreSpec) else StoreSpec(spec)
    url = parse_store_url(spec.url)
    directory = url.local_directory
    if directory is not None:
        return LocalStore(directory, stat_cache)
    policy = StorePolicy.resolve(spec.timeout_s, spec.retry_budget_s)
    if url.scheme == "gs":
        from marinbuild.store.gcs import GCSStore  # gcsfs costs 300 ms to import: only for gs://

        return GCSStore(url.text, machine_dir, policy)
    from fsspec.registry import known_implementations

    if url.scheme not in known_implementations:
        raise StoreError(
            f"unsupported store URL '{url.text}'",
            hint="use a directory, file://, gs:// or another fsspec URL (s3://, ...)",
        )
    from marinbuild.store.remote import RemoteStore

    return RemoteStore(url.text, machine_dir, policy)


def require_leases(store: Store, unsafe_no_locking: bool) -> None:
    """Refuse to build on a store whose leases exclude nobody, unless told it is fine."""
    if not store.exclusive_leases and not unsafe_no_locking:
        raise StoreError(
            f"store {store.url} cannot hold leases: its backend has no conditional writes, so two machines could "
            "run the same step at once and create-only entries are check-then-write",
            hint="use a gs:// or local store, or pass --unsafe-no-locking to accept duplicate runs "
            "(every result is still verified before use)",
        )


def store_salt(store: Store, create: bool = False) -> str:
    """The store-wide salt that enters every key: bump it to disown every result at once.

    `create`: write the store's metadata if it has none (first use, create-only: never
    overwrites a salt) — one read either way, the first request of every build."""
    data = store.read_bytes(layout.METADATA)
    if data is None:
        if not create or store.create_only(layout.METADATA, json.dumps({"format": STORE_FORMAT, "salt": ""}).encode()):
            return ""
        data = store.read_bytes(layout.METADATA) or b"{}"  # another builder created it first
    try:
        metadata = json.loads(data)
    except ValueError as error:
        raise StoreError(f"{store.url}/{layout.METADATA} is not valid JSON: {error}") from None
    if metadata.get("format") != STORE_FORMAT:
        raise StoreError(f"{store.url} has store format {metadata.get('format')}, this marinbuild reads {STORE_FORMAT}")
    return str(metadata.get("salt", ""))
