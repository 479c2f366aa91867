"""The store: outputs by key, create-only action-cache entries, attempts, logs."""

from __future__ import annotations

import json
from pathlib import Path

from marinbuild.errors import StoreError
from marinbuild.store import layout
from marinbuild.store.action_cache import ActionCache, Attempt, CacheEntry, Lookup, Outputs
from marinbuild.store.base import Lease, Store
from marinbuild.store.local import LocalStore

__all__ = [
    "ActionCache",
    "Attempt",
    "CacheEntry",
    "Lease",
    "Lookup",
    "Outputs",
    "Store",
    "initialize",
    "open_store",
    "store_salt",
]

STORE_FORMAT = 1


def open_store(url: str) -> Store:
    """Open the store at `url`. Opening writes nothing: a dry run leaves no trace."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return LocalStore(Path(url))
    if scheme == "file":
        return LocalStore(Path(rest))
    raise StoreError(
        f"unsupported store URL '{url}'",
        hint="this version supports local directories (a path or file://); gs:// stores come with the GCS store",
    )


def store_salt(store: Store) -> str:
    """The store-wide salt that enters every key: bump it to disown every result at once."""
    data = store.read_bytes(layout.METADATA)
    if data is None:
        return ""
    try:
        metadata = json.loads(data)
    except ValueError as error:
        raise StoreError(f"{store.url}/{layout.METADATA} is not valid JSON: {error}") from None
    if metadata.get("format") != STORE_FORMAT:
        raise StoreError(f"{store.url} has store format {metadata.get('format')}, this marinbuild reads {STORE_FORMAT}")
    return str(metadata.get("salt", ""))


def initialize(store: Store) -> None:
    """Write the store's metadata on first use (create-only: never overwrites a salt)."""
    if not store.exists(layout.METADATA):
        store.create_only(layout.METADATA, json.dumps({"format": STORE_FORMAT, "salt": ""}).encode())
