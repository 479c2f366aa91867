"""`marinbuild.lock`: the pins of a workspace's external artifacts, committed with its
BUILD files (like Bazel's `MODULE.bazel.lock`).

`marinbuild pin LABEL` lists what an `external` target names and records the listing's
digest here; a build then checks the same listing and stops if it changed. A diff of this
file in a code review is exactly the data that changed under the experiments.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from marinbuild.errors import WorkspaceError

LOCK_FILE = "marinbuild.lock"
_FORMAT = 1


@dataclass(frozen=True)
class Pin:
    """One external target's pinned contents."""

    url: str
    digest: str  # of the listing: names, sizes and checksums (store/listing.py)
    objects: int
    bytes: int
    pinned: str  # when, UTC
    by: str  # user@host


@dataclass(frozen=True)
class LockFile:
    path: Path
    pins: dict[str, Pin]

    @classmethod
    def read(cls, root: Path) -> LockFile:
        path = root / LOCK_FILE
        if not path.is_file():
            return cls(path, {})
        try:
            data = json.loads(path.read_text())
            if data.get("format") != _FORMAT:
                raise ValueError(f"format {data.get('format')}, this marinbuild reads {_FORMAT}")
            pins = {label: Pin(**fields) for label, fields in data["pins"].items()}
        except (ValueError, KeyError, TypeError) as error:
            raise WorkspaceError(
                f"{path} is not a marinbuild lock file: {error}",
                hint="restore it from version control, or remove it and pin again ('marinbuild pin //...')",
            ) from None
        return cls(path, pins)

    def with_pin(self, label: str, pin: Pin) -> LockFile:
        return LockFile(self.path, {**self.pins, label: pin})

    def write(self) -> None:
        """Sorted and indented, so that a review's diff shows one pin per hunk."""
        text = json.dumps(
            {"format": _FORMAT, "pins": {label: asdict(pin) for label, pin in sorted(self.pins.items())}},
            indent=2,
            sort_keys=True,
        )
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        temporary.write_text(text + "\n")
        os.replace(temporary, self.path)
