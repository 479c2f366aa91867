"""Machine-local memos: dicts kept in one pickle file each under `.marinbuild/`.

Three things are remembered between builds so a no-op build does almost no work: file
digests (the stat cache), loaded packages, and verified action-cache entries. Each memo
is only ever a shortcut — every value is re-validated against a cheap signature before
use — so losing one (a concurrent build writing last, a deleted file) costs time, never
correctness. A memo written by another version of marinbuild is ignored.
"""

from __future__ import annotations

import os
import pickle
import threading
import uuid
from collections.abc import Hashable
from pathlib import Path
from typing import Any


class Memo:
    def __init__(self, path: Path | None, version: str):
        self.path = path
        self.version = version
        self._data: dict[Hashable, Any] = {}
        self._dirty = False
        self._lock = threading.Lock()
        if path is None:
            return
        try:
            version_found, data = pickle.loads(path.read_bytes())
        except (OSError, EOFError, ValueError, TypeError, pickle.UnpicklingError, AttributeError, ImportError):
            return
        if version_found == version and isinstance(data, dict):
            self._data = data

    def get(self, key: Hashable) -> Any:
        return self._data.get(key)

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._data[key] = value
            self._dirty = True

    def save(self) -> None:
        """Write the memo atomically if it changed (a concurrent writer may win: that is fine)."""
        if self.path is None or not self._dirty:
            return
        with self._lock:
            payload = pickle.dumps((self.version, self._data), protocol=pickle.HIGHEST_PROTOCOL)
            self._dirty = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.tmp")
        temporary.write_bytes(payload)
        os.replace(temporary, self.path)
