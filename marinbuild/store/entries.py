"""What the action cache holds and hands out: an entry (the record that makes a key a hit),
the outputs a dependent sees, a look-up's answer, an attempt and its staging directory.

An entry verifies itself (`verify_entry`): it names the key it is filed under, its recipe
hashes to that key, and its tree digest is its manifest's (docs/guarantees.md, "A hit is
the right bytes"), wherever its bytes come from.
"""

from __future__ import annotations

import calendar
import enum
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.hashing import digest_json
from marinbuild.store import layout
from marinbuild.store.manifest import Manifest

ENTRY_FORMAT = 1


_ID_TIME = "%Y%m%dT%H%M%SZ"  # the stamp that begins attempt and invocation ids


def new_attempt_id() -> str:
    """Sortable by time, unique across machines. The pid is zero-padded so that, within one
    second, ids sort as numbers and not as strings ('9999' after '10000')."""
    return time.strftime(_ID_TIME, time.gmtime()) + f"-{os.getpid():07d}-{secrets.token_hex(3)}"


def attempt_id_time(attempt_id: str) -> float | None:
    """When an attempt or invocation id was made, to the second (None if it is not one)."""
    try:
        return float(calendar.timegm(time.strptime(attempt_id[:16], _ID_TIME)))
    except ValueError:
        return None


class AttemptStatus(str, enum.Enum):
    """How an attempt ended. Only `succeeded` publishes; `query failed()` means `failed`."""

    RUNNING = "running"  # not finished yet
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the step itself failed
    CANCELLED = "cancelled"  # the build was interrupted while the step ran
    LEASE_LOST = "lease_lost"  # another builder took the key over; this one stopped
    TIMED_OUT = "timed_out"  # it ran past its timeout and was killed
    # Never written: how a reader sees a `running` record whose key no builder holds any
    # more (its builder died without saying: killed, out of memory, machine lost).
    ABANDONED = "abandoned"


@dataclass(frozen=True)
class CacheEntry:
    key: str
    label: str
    manifest: Manifest
    recipe: dict[str, Any]
    provenance: dict[str, Any]
    attempt: str
    tree_digest: str
    checksums: dict[str, str] = field(default_factory=dict)  # the backend's, by path (remote stores)

    def to_json(self) -> dict[str, Any]:
        extra = {"checksums": self.checksums} if self.checksums else {}
        return {
            "format": ENTRY_FORMAT,
            "key": self.key,
            "label": self.label,
            "tree_digest": self.tree_digest,
            "files": self.manifest.to_json(),
            "recipe": self.recipe,
            "provenance": self.provenance,
            "attempt": self.attempt,
            **extra,
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
            checksums=data.get("checksums", {}),
        )


@dataclass(frozen=True)
class Outputs:
    """A published entry as its dependents see it: where its files are, and their digests."""

    key: str
    tree_digest: str
    manifest: Manifest
    directory: str  # a path, or a URL on a remote store; a string: a no-op build makes 10,000
    rule_code: str | None = None  # the digest of the rule's source when it was built (keys.code_digest)
    # An external artifact, pinned rather than built: `directory` is where it lives (a URL
    # or a local directory) and `tree_digest` the digest of its listing (store/listing.py).
    pinned: bool = False


@dataclass(frozen=True)
class Lookup:
    """The verified outputs of a key, or why there are none.

    `problem` is set when an entry exists but cannot be used (missing or corrupt files).
    """

    outputs: Outputs | None
    problem: str | None = None


@dataclass(frozen=True)
class Uploaded:
    """Outputs moved or uploaded under their key, with no entry yet: what `publish` commits."""

    manifest: Manifest
    checksums: dict[str, str]  # the backend's, by path (remote stores)

    def to_json(self) -> dict[str, Any]:
        return {"files": self.manifest.to_json(), "checksums": self.checksums}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Uploaded:
        return cls(Manifest.from_json(data["files"]), data["checksums"])


@dataclass(frozen=True)
class Staging:
    """The local directory a running attempt works in, wherever it runs (this machine or
    a Ray host): `out` receives the outputs, `work` is the step's working directory, and
    `log` its log as it is written. Nothing in it is read as output until published."""

    root: Path

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def log(self) -> Path:
        return self.root / layout.STAGING_LOG

    @property
    def mark(self) -> Path:
        return self.root / layout.STAGING_MARK

    @classmethod
    def create(cls, root: Path) -> Staging:
        staging = cls(root)
        staging.out.mkdir(parents=True)
        staging.work.mkdir()
        staging.log.touch()
        return staging


@dataclass
class Attempt:
    """One try at running a key; recorded in the store whatever its outcome."""

    key: str
    label: str
    attempt_id: str
    staging: Staging
    record: dict[str, Any] = field(default_factory=dict)


def verify_entry(key: str, data: bytes, path: str) -> CacheEntry | str:
    """The entry whose bytes are `data`, filed under `key` at `path` (a URL, for messages),
    or what is wrong with it (docs/guarantees.md): it must name `key`, its recipe must
    hash to `key`, and its tree digest must be its manifest's. Wherever the bytes come
    from — this store, or a mirror in another region — the same checks decide."""
    try:
        entry = CacheEntry.from_json(json.loads(data))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        return f"action-cache entry {path} is unreadable ({error})"
    if entry.key != key:
        return f"action-cache entry {path} names another key, {entry.key[:12]} (corrupt: filed under the wrong key)"
    if digest_json(entry.recipe) != key:
        return f"action-cache entry {path} holds a recipe whose key is not {key[:12]} (corrupt)"
    if entry.tree_digest != entry.manifest.tree_digest:
        # Dependents' keys are made of this digest: it must be the manifest's, not just stored.
        return f"action-cache entry {path} has a tree digest that does not match its manifest (corrupt)"
    return entry
