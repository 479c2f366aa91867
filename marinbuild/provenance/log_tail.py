"""Following the log of the attempt that holds a key, while this builder waits for it.

The holder uploads its log as it grows (`store.live_sync.syncing`); the waiter polls the
newest attempt record of the key and prints the lines it has not shown yet.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from marinbuild.errors import StoreError
from marinbuild.provenance.attempts import last_attempt, read_log
from marinbuild.store import AttemptStatus, Store

_POLL_S = 1.0
_FIRST_LINES = 10  # joining late: the last lines are enough


class HolderLogTail:
    """Print the log of the attempt holding `key`, started on the first sign of waiting."""

    def __init__(self, store: Store, key: str, emit: Callable[[str], None]):
        self.store, self.key, self.emit = store, key, emit
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._follow, name=f"tail {self.key[:12]}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()

    def _follow(self) -> None:
        shown: dict[str, int] = {}  # attempt id -> complete lines already printed
        while not self._stopping.is_set():
            with contextlib.suppress(StoreError, OSError):
                record = last_attempt(self.store, self.key)
                if record is not None and record.status is AttemptStatus.RUNNING:
                    lines = (read_log(self.store, record) or "").splitlines(keepends=True)
                    complete = [line.rstrip("\n") for line in lines if line.endswith("\n")]
                    start = shown.setdefault(record.attempt_id, max(len(complete) - _FIRST_LINES, 0))
                    for line in complete[start:]:
                        self.emit(f"[attempt {record.attempt_id}] {line}")
                    shown[record.attempt_id] = max(start, len(complete))
            self._stopping.wait(_POLL_S)
