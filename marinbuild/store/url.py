"""Store URLs: a directory, `file://DIR`, `gs://bucket/prefix` or another fsspec URL.

The one place that tells a URL from a path, so that "is this store a directory of this
machine?" has one answer everywhere (opening the store, resolving a relative setting,
keeping the store out of package scans).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StoreURL:
    """A parsed store location: `scheme` is "" for a plain directory."""

    text: str
    scheme: str
    rest: str

    @property
    def local_directory(self) -> Path | None:
        """The directory of a local store (plain path or file://), None for a remote one."""
        if self.scheme == "":
            return Path(self.text)
        if self.scheme == "file":
            return Path(self.rest)
        return None


def parse_store_url(text: str) -> StoreURL:
    scheme, separator, rest = text.partition("://")
    if not separator:
        return StoreURL(text, "", text)
    return StoreURL(text, scheme, rest)


def resolve_store_url(text: str, root: Path) -> str:
    """A store setting made absolute: a relative directory is taken from `root` (the
    workspace root); URLs are kept as they are."""
    if parse_store_url(text).scheme:
        return text
    return str((root / text).resolve())
