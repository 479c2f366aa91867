"""The store's records, as callers see them: attempts and their logs, the label index,
invocations. Everything above the store reads and writes records through this API, never
through `layout` paths, so the layout can change in one place.

Records are small JSON objects written whole (`write_bytes` replaces atomically), so a
reader sees a record before or after an update, never half of one.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from marinbuild.hashing import canonical_json
from marinbuild.store import layout
from marinbuild.store.base import Store


def _parse(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _names(store: Store, prefix: str, suffix: str) -> list[str]:
    """The names (less `suffix`) of the objects directly named `<prefix>/<name><suffix>`."""
    names = (path.rsplit("/", 1)[1] for path in store.list(prefix))
    return sorted(name.removesuffix(suffix) for name in names if name.endswith(suffix))


class Records:
    def __init__(self, store: Store):
        self.store = store

    # -- attempts --------------------------------------------------------------------------

    def write_attempt(self, record: dict[str, Any]) -> None:
        """Create or update an attempt record (`key` and `attempt` name it)."""
        self.store.write_bytes(layout.attempt_record(record["key"], record["attempt"]), canonical_json(record).encode())

    def read_attempt(self, key: str, attempt_id: str) -> dict[str, Any] | None:
        """The record as written; None if it is gone (`cache gc`) or unreadable."""
        return _parse(self.store.read_bytes(layout.attempt_record(key, attempt_id)))

    def attempt_ids(self, key: str) -> list[str]:
        """The ids of the attempts at `key`, oldest first (attempt ids sort by time)."""
        return _names(self.store, layout.attempts(key), ".json")

    def put_log(self, key: str, attempt_id: str, local: Path) -> None:
        """Keep a finished attempt's log (the local file may be consumed)."""
        self.store.put_file(local, layout.attempt_log(key, attempt_id))

    def read_log(self, key: str, attempt_id: str) -> bytes | None:
        """A finished attempt's log, or the latest upload of a running one's."""
        return self.store.read_bytes(layout.attempt_log(key, attempt_id))

    def log_file(self, key: str, attempt_id: str) -> Path:
        """Where a finished attempt's log is a file of this machine (a remote store keeps a
        copy of the logs this machine uploaded)."""
        return self.store.local_path(layout.attempt_log(key, attempt_id))

    def running_log_file(self, attempt_id: str) -> Path:
        """Where a running attempt writes its log, if it runs on this machine or writes
        into a local store."""
        return self.store.local_path(layout.staging_log(attempt_id))

    def key_holder(self, key: str) -> str | None:
        """Who holds the lease of `key` right now (None: no builder runs it)."""
        return self.store.lease_holder(layout.lock(key))

    # -- the label index -------------------------------------------------------------------

    def index_attempt(self, label: str, attempt_id: str, key: str) -> None:
        self.store.write_bytes(layout.label_attempt(label, attempt_id, key), label.encode())

    def label_attempts(self, label: str) -> list[tuple[str, str]]:
        """(attempt id, key) of every attempt of `label`, oldest first."""
        found = []
        for path in sorted(self.store.list(layout.label_attempts(label))):
            attempt_id, _, key = path.rsplit("/", 1)[1].partition(".")
            found.append((attempt_id, key))
        return found

    # -- listings of pinned external artifacts ----------------------------------------------

    def write_listing(self, digest: str, listing: dict[str, Any]) -> None:
        """Keep a pinned listing, so that a later change can be named object by object."""
        self.store.write_bytes(layout.listing(digest), canonical_json(listing).encode())

    def read_listing(self, digest: str) -> dict[str, Any] | None:
        return _parse(self.store.read_bytes(layout.listing(digest)))

    # -- entries copied from mirrors in other regions ------------------------------------

    def write_copy(self, record: dict[str, Any]) -> None:
        """Say where the entry of `record["key"]` was copied from (store/mirrors.py)."""
        self.store.write_bytes(layout.copy_record(record["key"]), canonical_json(record).encode())

    def read_copy(self, key: str) -> dict[str, Any] | None:
        return _parse(self.store.read_bytes(layout.copy_record(key)))

    def copies(self) -> list[dict[str, Any]]:
        """Every copy record (`cache stats`), read concurrently on a remote store."""
        paths = self.store.list("copies")
        with ThreadPoolExecutor(max_workers=max(1, min(len(paths), self.store.lookup_concurrency))) as pool:
            found = pool.map(lambda path: _parse(self.store.read_bytes(path)), paths)
            return [record for record in found if record is not None]

    # -- invocations -----------------------------------------------------------------------

    def write_invocation(
        self, record: dict[str, Any], events: bytes | None = None, targets_json: str | None = None
    ) -> None:
        """Create or update an invocation record (`id` names it), and its event stream.

        `targets_json`: the record's `targets`, given as JSON text already (the build's
        `--json` output is made of the same text: a no-op's lists 10,000 targets)."""
        text = canonical_json(record)
        if targets_json is not None:
            assert "targets" not in record
            text = f'{text[:-1]},"targets":{targets_json}}}'
        self.store.write_bytes(layout.invocation(record["id"]), text.encode())
        if events is not None:
            self.store.write_bytes(layout.invocation_events(record["id"]), events)

    def read_invocation(self, invocation_id: str) -> dict[str, Any] | None:
        return _parse(self.store.read_bytes(layout.invocation(invocation_id)))

    def invocation_ids(self) -> list[str]:
        """Every invocation's id, oldest first (ids sort by time)."""
        return _names(self.store, "invocations", ".json")
