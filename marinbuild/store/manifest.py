"""Output manifests: every file of an output with its BLAKE3 digest and size.

The tree digest (a digest of the canonical manifest) is what a dependent's key is made
of, so two builds that produce the same bytes give their dependents the same key — the
early cutoff that spares downstream steps after a no-op change upstream.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from marinbuild.hashing import digest_file, digest_json


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, '/'-separated
    digest: str
    size: int


@dataclass(frozen=True)
class Manifest:
    files: tuple[FileEntry, ...]

    @cached_property
    def tree_digest(self) -> str:
        return digest_json(self.to_json())

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files)

    def to_json(self) -> list[dict[str, Any]]:
        return [{"path": entry.path, "blake3": entry.digest, "size": entry.size} for entry in self.files]

    @classmethod
    def from_json(cls, data: Iterable[dict[str, Any]]) -> Manifest:
        return cls(tuple(FileEntry(item["path"], item["blake3"], item["size"]) for item in data))


class OutputError(Exception):
    """A step's output directory holds something that cannot be published (a symlink)."""


def list_files(root: Path) -> list[str]:
    """Every regular file under `root`, relative and sorted. A symlink, to a file or a
    directory, anywhere in the tree is refused: published bytes must be the step's own,
    never a pointer out of its output (`etc -> /etc` would publish a machine's files)."""
    found: list[str] = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories.sort()
        for name in subdirectories:
            _refuse_symlink(root, Path(directory, name))
        for name in files:  # a directory of 100,000 shards: each file once, never searched for
            path = Path(directory, name)
            _refuse_symlink(root, path)
            found.append(path.relative_to(root).as_posix())
    return sorted(found)


def _refuse_symlink(root: Path, path: Path) -> None:
    if path.is_symlink():
        raise OutputError(
            f"output {path.relative_to(root)} is a symlink (to {os.readlink(path)}); "
            "outputs must be regular files and directories: copy what it points to instead"
        )


def hash_tree(root: Path) -> Manifest:
    """Hash freshly written outputs (never cached: they are new by definition)."""
    return Manifest(
        tuple(
            FileEntry(relative, digest_file(root / relative), (root / relative).stat().st_size)
            for relative in list_files(root)
        )
    )
