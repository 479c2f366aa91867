"""A machine-local cache of loaded packages, so a no-op build does not re-run Starlark.

Evaluating 500 BUILD files costs most of a second; checking that nothing they read has
changed costs a few milliseconds. A cached package is reused only if every file it read
(its BUILD file and each .star file it loaded, transitively) has the same content
digest, every glob() it called returns the same files, and the rules are the same
(their names, versions and attribute schemas, the marinbuild version, and the source of
the code loading runs: rule modules with their packages, marinbuild's loading layers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from marinbuild.hashing import StatCache, digest_json
from marinbuild.memo import Memo
from marinbuild.targets.identity import IdentityTemplate
from marinbuild.targets.rule import Rule
from marinbuild.version import __version__


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
    # name, rule, attrs, file, line, the labels the attributes mention, and the template of
    # the identity attributes (targets/identity.py)
    targets: list[tuple[str, str, dict, str, int, tuple[str, ...], IdentityTemplate | None]] = field(
        default_factory=list
    )


# Bumped whenever PackageRecord changes shape: an older pickle is then ignored, not misread.
_RECORD_FORMAT = 3


def rules_fingerprint(rules: dict[str, Rule], code: dict[str, str]) -> str:
    """What every cached package depends on besides the files it read: the rules (names,
    versions, attribute schemas) and `code`, the digest of each file of code loading runs
    (`rule_modules.loading_code`): a rule's check or computed default edited, every package
    is evaluated again."""
    schema = {
        name: {
            "version": rule.version,
            "attrs": {
                attr_name: [attr.type.name, attr.identity, attr.omit_default, None if attr.mandatory else attr.default]
                for attr_name, attr in rule.all_attrs.items()
            },
        }
        for name, rule in sorted(rules.items())
    }
    return digest_json({"marinbuild": __version__, "records": _RECORD_FORMAT, "rules": schema, "code": code})


class PackageCache:
    def __init__(self, memo: Memo, root: Path, stat_cache: StatCache):
        self.memo = memo
        self.root = root
        self.stat_cache = stat_cache

    def get(self, package: str, glob: Callable[[tuple[str, ...], tuple[str, ...]], list[str]]) -> PackageRecord | None:
        """The record of `package` if nothing it read has changed. `glob(include, exclude)` re-lists files."""
        record = self.memo.get(package)
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
        self.memo.put(package, record)

    def file_digest(self, relative: str) -> str:
        return self.stat_cache.digest(self.root / relative)[0]

    def save(self) -> None:
        self.memo.save()
