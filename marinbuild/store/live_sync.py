"""Keeping the store up to date with a step while it runs, for the builders that wait on it.

A running step writes its log and, for a resumable rule, its checkpoints on local disk.
Another machine sharing the store sees only what is uploaded, so while the step runs a
background thread copies both to the store every `MARINBUILD_SYNC_S` seconds:

- the log to `attempts/<kk>/<key>/<id>.log`, which a builder waiting for the key's lease
  (`provenance.log_tail`) or `marinbuild log` reads;
- the scratch directory to `scratch/<kk>/<key>/` (remote stores only: a local store's
  scratch is already inside it), so that whoever takes the key over after a crash, on
  any machine, resumes from the last checkpoint rather than from step 0.

A store that does not answer must not fail the step, nor hold it up: each round's
uploads get one request deadline (`deadlines.briefly`), and what failed goes again the
next round.

Objects are written whole, so a reader never sees half an upload, and each object is
written at most once per interval, under GCS's limit of about one write per second per
object. Scratch files are uploaded oldest first: a checkpoint format that writes its
"complete" marker last (Levanter's does) is then never restored without its data. Write
checkpoint files whole (write, then rename into place) so that no half-written file is
copied.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from marinbuild.errors import StoreError
from marinbuild.store import deadlines, layout
from marinbuild.store.base import ScratchMirror, Store, TransferringStore

_DEFAULT_SYNC_S = 10.0
_MIN_SYNC_S = 1.0  # GCS: about one write per second per object


def sync_interval_s() -> float:
    return max(float(os.environ.get("MARINBUILD_SYNC_S", _DEFAULT_SYNC_S)), _MIN_SYNC_S)


class _LogUploader:
    """Copies a growing log file to its object in the store."""

    def __init__(self, store: Store, local: Path, path: str):
        self.store, self.local, self.path = store, local, path
        self.uploaded_size = -1

    def sync(self) -> None:
        data = self.local.read_bytes()
        if len(data) != self.uploaded_size:
            self.store.write_bytes(self.path, data)
            self.uploaded_size = len(data)


class RemoteScratch:
    """A resumable step's scratch directory, mirrored to `scratch/<kk>/<key>/` in a remote store."""

    def __init__(self, store: TransferringStore, key: str, local: Path):
        self.store, self.prefix, self.local = store, layout.scratch(key), local
        self.uploaded: dict[str, tuple[int, int]] = {}  # name -> (size, mtime_ns) when uploaded

    def restore(self) -> int:
        """Download the stored scratch if this machine has none (a takeover from another
        machine); the number of files restored. A non-empty local scratch is this
        machine's own earlier run of the key, at least as far along as what it uploaded."""
        if any(path.is_file() for path in self.local.rglob("*")):
            return 0
        stored = self.store.stat_tree(self.prefix)
        files = {f"{self.prefix}/{name}": self.local / name for name in stored}
        for local in files.values():
            local.parent.mkdir(parents=True, exist_ok=True)
        self.store.get_files(files, sum(stat.size for stat in stored.values()))
        for name in stored:
            status = (self.local / name).stat()
            self.uploaded[name] = (status.st_size, status.st_mtime_ns)
        return len(stored)

    def sync(self) -> None:
        present: dict[str, os.stat_result] = {}
        for path in self.local.rglob("*"):
            with contextlib.suppress(FileNotFoundError):  # removed while we looked
                if path.is_file():
                    present[path.relative_to(self.local).as_posix()] = path.stat()
        changed = [
            name for name, status in present.items() if self.uploaded.get(name) != (status.st_size, status.st_mtime_ns)
        ]
        changed.sort(key=lambda name: present[name].st_mtime_ns)
        uploads = {self.local / name: f"{self.prefix}/{name}" for name in changed}
        try:
            self.store.put_files(uploads)
        except FileNotFoundError:
            return  # a file vanished mid-upload (an old checkpoint deleted): next round
        for name in changed:
            status = present[name]  # as seen before the upload: a file that grew meanwhile goes again
            self.uploaded[name] = (status.st_size, status.st_mtime_ns)
        for name in [name for name in self.uploaded if name not in present]:
            self.store.delete(f"{self.prefix}/{name}")
            del self.uploaded[name]

    def discard(self) -> None:
        """The key is published: its checkpoints are of no further use."""
        self.store.delete(self.prefix)


@contextlib.contextmanager
def syncing(store: Store, key: str, attempt_id: str, log: Path | None, scratch: ScratchMirror | None) -> Iterator[None]:
    """Upload the attempt's log (and scratch) every interval while the block runs, and
    once more at its end, whatever the outcome. (`log` None: a Ray host syncs only the
    scratch; the driver uploads the log it streams from every host.)"""
    syncs: list[Callable[[], None]] = (
        [] if log is None else [_LogUploader(store, log, layout.attempt_log(key, attempt_id)).sync]
    )
    syncs += [scratch.sync] if scratch is not None else []
    stopping = threading.Event()

    def run_all() -> None:
        for sync in syncs:
            try:
                with deadlines.briefly():
                    sync()
            except (StoreError, OSError):
                pass  # an unreachable store must not fail the step; the next round retries

    def loop() -> None:
        while not stopping.wait(sync_interval_s()):
            run_all()

    thread = threading.Thread(target=loop, name=f"sync {key[:12]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stopping.set()
        thread.join()
        run_all()
