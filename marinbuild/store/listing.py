"""What lies at a URL that no build made — a team's tokenized data, a checkpoint — listed
without reading it: every object's name, size, the content checksum the backend keeps
(GCS: CRC32C, else MD5; a local directory: BLAKE3 through the stat cache) and its version
(GCS: generation).

The listing's digest pins the contents: it is the key of an `external` target, and what a
dependent's key holds for it, exactly as a built output's tree digest. The digest covers
names, sizes and checksums only — not versions, nor where the objects are — so a copy of
the same bytes in another bucket pins the same, and a rewrite of identical bytes (a new
generation) changes nothing downstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marinbuild.errors import StoreError
from marinbuild.hashing import StatCache, digest_json
from marinbuild.store.base import Store


@dataclass(frozen=True)
class ListedObject:
    path: str  # relative to the listed URL, '/'-separated
    size: int
    checksum: str  # "crc32c:...", "md5:..." or "blake3:..."
    version: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "checksum": self.checksum, "version": self.version}


@dataclass(frozen=True)
class Listing:
    url: str
    objects: tuple[ListedObject, ...]

    @property
    def digest(self) -> str:
        return digest_json([[item.path, item.size, item.checksum] for item in self.objects])

    @property
    def total_bytes(self) -> int:
        return sum(item.size for item in self.objects)

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "objects": [item.to_json() for item in self.objects]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Listing:
        return cls(data["url"], tuple(ListedObject(**item) for item in data["objects"]))

    def changes_since(self, before: Listing, most: int = 10) -> list[str]:
        """What differs from an earlier listing of the same URL, one line per object (the
        first `most`, then a count)."""
        old = {item.path: item for item in before.objects}
        new = {item.path: item for item in self.objects}
        lines = [f"{path}: removed" for path in sorted(old.keys() - new.keys())]
        lines += [f"{path}: added ({new[path].size:,} bytes)" for path in sorted(new.keys() - old.keys())]
        for path in sorted(old.keys() & new.keys()):
            if (old[path].size, old[path].checksum) != (new[path].size, new[path].checksum):
                lines.append(f"{path}: changed ({old[path].size:,} → {new[path].size:,} bytes)")
        return lines[:most] + ([f"... and {len(lines) - most} more"] if len(lines) > most else [])


def list_objects(store: Store, url: str, stat_cache: StatCache) -> Listing:
    """List what lies under `store` (opened at `url`). Nothing is downloaded: a remote
    backend's listing carries each object's checksum; a local directory's files are hashed
    once and then known through the stat cache."""
    found = store.stat_tree("")
    if not found:
        raise StoreError(f"nothing at {url}", hint="an external artifact names a directory that already exists")
    objects = []
    for path, stat in sorted(found.items()):
        checksum = stat.checksum
        if checksum is None:
            local = store.local_path(path)
            if not Path(local).is_file():
                raise StoreError(f"{url}/{path} has no checksum to pin it by", hint="use gs:// or a local directory")
            checksum = "blake3:" + stat_cache.digest(local)[0]
        objects.append(ListedObject(path, stat.size, checksum, stat.version))
    return Listing(url, tuple(objects))
