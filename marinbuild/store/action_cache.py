"""The action cache: key -> verified outputs, and the publish protocol that fills it.

Publish order (DESIGN.md invariant 1): outputs are written and hashed in staging, moved
into place, and only then is the entry created, create-only. A reader trusts nothing
without an entry, and verifies every file of an entry against its manifest before
serving it (invariant 3), so a crash at any point, a deleted file or a flipped byte is
a miss — reported, and rebuilt — never a wrong answer.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.store import layout
from marinbuild.store.base import Store
from marinbuild.hashing import StatCache, canonical_json
from marinbuild.store.manifest import Manifest, hash_tree

ENTRY_FORMAT = 1


def new_attempt_id() -> str:
    """Sortable by time, unique across machines."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class CacheEntry:
    key: str
    label: str
    manifest: Manifest
    recipe: dict[str, Any]
    provenance: dict[str, Any]
    attempt: str
    tree_digest: str


    def to_json(self) -> dict[str, Any]:
        return {
            "format": ENTRY_FORMAT,
            "key": self.key,
            "label": self.label,
            "tree_digest": self.tree_digest,
            "files": self.manifest.to_json(),
            "recipe": self.recipe,
            "provenance": self.provenance,
            "attempt": self.attempt,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CacheEntry:
        return cls(
            key=data["key"],
            label=data["label"],
            manifest=Manifest.from_json(data["files"]),
            tree_digest=data["tree_digest"],
            recipe=data["recipe"],
            provenance=data["provenance"],
            attempt=data["attempt"],
        )


@dataclass(frozen=True)
class Lookup:
    """A verified entry and where its outputs are, or why there is none.

    `problem` is set when an entry exists but cannot be used (missing or corrupt files).
    """

    entry: CacheEntry | None
    problem: str | None = None
    output: Path | None = None


@dataclass
class Attempt:
    """One try at running a key; recorded in the store whatever its outcome."""

    key: str
    label: str
    attempt_id: str
    staging: Path
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def out(self) -> Path:
        return self.staging / "out"

    @property
    def tmp(self) -> Path:
        return self.staging / "work"

    @property
    def log_path(self) -> Path:
        return self.staging / "log.txt"


class ActionCache:
    def __init__(self, store: Store, stat_cache: StatCache):
        self.store = store
        self.stat_cache = stat_cache

    def output_dir(self, key: str) -> Path:
        return self.store.local_path(layout.output(key))

    def lookup(self, key: str) -> Lookup:
        data = self.store.read_bytes(layout.entry(key))
        if data is None:
            return Lookup(None)
        try:
            entry = CacheEntry.from_json(json.loads(data))
        except (ValueError, KeyError, TypeError) as error:
            return Lookup(None, f"action-cache entry {layout.entry(key)} is unreadable ({error})")
        if entry.tree_digest != entry.manifest.tree_digest:
            # Dependents' keys are made of this digest: it must be the manifest's, not just stored.
            return Lookup(None, f"action-cache entry {layout.entry(key)} has a tree digest that does not match its manifest (corrupt)")
        output = self.output_dir(key)
        problem = self.verify(entry, output)
        return Lookup(None, problem) if problem else Lookup(entry, output=output)

    def verify(self, entry: CacheEntry, output: Path) -> str | None:
        """Check every output file against the manifest; the first problem found, or None."""
        root = f"{output}/"
        for item in entry.manifest.files:
            try:
                digest, size = self.stat_cache.digest(root + item.path)
            except FileNotFoundError:
                return f"output file {item.path} is missing from the store"
            if size != item.size or digest != item.digest:
                return f"output file {item.path} does not match its manifest (corrupt)"
        return None

    # -- running and publishing ----------------------------------------------------------

    def start_attempt(self, key: str, label: str, info: dict[str, Any]) -> Attempt:
        attempt_id = new_attempt_id()
        staging = self.store.staging_dir(layout.staging(attempt_id))
        attempt = Attempt(key, label, attempt_id, staging)
        attempt.out.mkdir()
        attempt.tmp.mkdir()
        attempt.log_path.touch()
        attempt.record = {"key": key, "label": label, "attempt": attempt_id, "status": "running", **info}
        self.store.write_bytes(layout.attempt_record(key, attempt_id), canonical_json(attempt.record).encode())
        return attempt

    def finish_attempt(self, attempt: Attempt, status: str, **details: Any) -> None:
        """Record the outcome and log of an attempt, and drop its staging directory."""
        attempt.record.update(status=status, **details)
        self.store.put_file(attempt.log_path, layout.attempt_log(attempt.key, attempt.attempt_id))
        self.store.write_bytes(
            layout.attempt_record(attempt.key, attempt.attempt_id), canonical_json(attempt.record).encode()
        )
        self.store.delete(layout.staging(attempt.attempt_id))

    def publish(self, attempt: Attempt, recipe: dict[str, Any], provenance: dict[str, Any]) -> CacheEntry:
        """Publish an attempt's outputs under its key; the first entry of a key wins."""
        manifest = hash_tree(attempt.out)
        existing = self.lookup(attempt.key)
        if existing.entry is not None:
            return existing.entry
        if existing.problem is not None:
            self._quarantine(attempt.key, attempt.attempt_id)
        self.store.put_dir(attempt.out, layout.output(attempt.key))
        root = self.output_dir(attempt.key)
        for item in manifest.files:
            self.stat_cache.record(root / item.path, item.digest)
        entry = CacheEntry(
            attempt.key, attempt.label, manifest, recipe, provenance, attempt.attempt_id, manifest.tree_digest
        )
        if not self.store.create_only(layout.entry(attempt.key), canonical_json(entry.to_json()).encode()):
            winner = self.lookup(attempt.key).entry
            if winner is not None:
                return winner
        return entry

    def _quarantine(self, key: str, attempt_id: str) -> None:
        """Move an unusable entry aside (kept for inspection) so the key can be published again."""
        data = self.store.read_bytes(layout.entry(key))
        if data is not None:
            self.store.write_bytes(layout.quarantine(key, attempt_id), data)
            self.store.delete(layout.entry(key))
