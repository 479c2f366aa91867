"""A machine-local cache of loaded packages, so a no-op build does not re-run Starlark.

Evaluating 500 BUILD files costs most of a second; checking that nothing they read has
changed costs a few milliseconds. A cached package is reused only if every file it read
(its BUILD file and each .star file it loaded, transitively) has the same content
digest, every glob() it called returns the same files, and the rules are the same
(their names, versions and attribute schemas, and the marinbuild version).
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import marinbuild
from marinbuild.hashing import StatCache, canonical_json, digest_bytes
from marinbuild.targets.rule import Rule

_FORMAT = 1


@dataclass(frozen=True)
class GlobCall:
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    result: tuple[str, ...]


@dataclass
class PackageRecord:
    """What evaluating one package read, and the targets it declared (as plain data)."""

    files: dict[str, str] = field(default_factory=dict)  # workspace-relative path -> digest
    globs: list[GlobCall] = field(default_factory=list)
    targets: list[tuple[str, str, dict, str, int]] = field(default_factory=list)  # name, rule, attrs, file, line


def rules_fingerprint(rules: dict[str, Rule]) -> str:
    schema = {
        name: {
            "version": rule.version,
            "attrs": {
                attr_name: [attr.type.name, attr.identity, None if attr.mandatory else attr.default]
                for attr_name, attr in rule.all_attrs.items()
            },
        }
        for name, rule in sorted(rules.items())
    }
    return digest_bytes(canonical_json({"marinbuild": marinbuild.__version__, "rules": schema}).encode())


class PackageCache:
    def __init__(self, path: Path, root: Path, fingerprint: str, stat_cache: StatCache):
        self.path = path
        self.root = root
        self.fingerprint = fingerprint
        self.stat_cache = stat_cache
        self._records: dict[str, PackageRecord] = {}
        self._dirty = False
        try:
            data = pickle.loads(path.read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
            return
        if isinstance(data, dict) and data.get("format") == _FORMAT and data.get("fingerprint") == fingerprint:
            self._records = data["packages"]

    def get(self, package: str, glob: callable) -> PackageRecord | None:
        """The record of `package` if nothing it read has changed. `glob(include, exclude)` re-lists files."""
        record = self._records.get(package)
        if record is None:
            return None
        for relative, digest in record.files.items():
            try:
                if self.stat_cache.digest(self.root / relative)[0] != digest:
                    return None
            except OSError:
                return None
        for call in record.globs:
            if tuple(glob(call.include, call.exclude)) != call.result:
                return None
        return record

    def put(self, package: str, record: PackageRecord) -> None:
        self._records[package] = record
        self._dirty = True

    def file_digest(self, relative: str) -> str:
        return self.stat_cache.digest(self.root / relative)[0]

    def save(self) -> None:
        if not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        data = {"format": _FORMAT, "fingerprint": self.fingerprint, "packages": self._records}
        temporary.write_bytes(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(temporary, self.path)
        self._dirty = False
