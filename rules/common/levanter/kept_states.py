"""The states a training keeps (`keep_checkpoints`), published while it still trains, and
the checkpoint files every state and output holds."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from marinbuild.targets.context import StepFailed
from marinbuild.targets.rule import checkpoint_dir
from rules.common.levanter.metrics import read_rows
from rules.common.training_files import CHECKPOINT, METRICS, MODEL_FILE, TOKENIZER_DIR

# The timestamp written into a published checkpoint's metadata.json in place of the save
# time, which would make every training's output differ. Levanter reads it only to order
# checkpoints in one directory, and an output holds one.
CHECKPOINT_TIMESTAMP = "2000-01-01T00:00:00"
FINAL_CHECKPOINT_WAIT_S = 600.0
# How often the scratch space is looked at for kept checkpoints while a run trains.
_KEPT_POLL_S = 0.5
# A kept state's files were written: publish them (`ctx.publish_checkpoint`).
PublishFn = Callable[[int, Path], None]


def fix_checkpoint_timestamp(metadata: Path) -> None:
    fields = json.loads(metadata.read_text())
    metadata.write_text(json.dumps({**fields, "timestamp": CHECKPOINT_TIMESTAMP}))


def wait_for_checkpoint(metadata: Path, timeout_s: float = FINAL_CHECKPOINT_WAIT_S) -> bool:
    """Whether a checkpoint is complete, waiting for it if need be: Levanter saves
    asynchronously and its `train_lm.main` returns without waiting for the last save to
    commit, so on a loaded machine `metadata.json`, written at commit, can appear a moment
    after training returns."""
    deadline = time.monotonic() + timeout_s
    while not metadata.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


class KeptStates:
    """The states a run keeps, each assembled in `into` as it lies in the output under
    `checkpoint_dir(step)`: `checkpoint/` (its Levanter checkpoint, with the fixed
    timestamp), `metrics.jsonl` up to its step, `model.json` and `tokenizer/`.

    A state is complete once its checkpoint's `metadata.json` (written last) is there and
    its step's metrics line is written (the line comes when the next step starts). While
    Levanter trains, a thread publishes each complete state at once, so that what reads it
    (`eval_lm(step = ...)`, a cooldown) can start before the run ends; the same files go
    into the output too, from where marinbuild publishes a state it could not publish yet.
    """

    def __init__(
        self, steps: Sequence[int], checkpoints: Path, metrics: Path, record: str, tokenizer: Path, into: Path
    ):
        self.pending = sorted(steps)
        self.ready: dict[int, Path] = {}
        self.checkpoints, self.metrics, self.record, self.into = checkpoints, metrics, record, into
        self.tokenizer = tokenizer
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def watching(self, publish: PublishFn | None) -> Iterator[None]:
        """Publish each state as it is written, until the block ends (nothing without `publish`)."""
        if publish is None or not self.pending:
            yield
            return
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(_KEPT_POLL_S) and self.pending:
                for step, directory in self.collect():
                    publish(step, directory)

        thread = threading.Thread(target=watch, name="kept-checkpoints", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            for step, directory in self.collect():  # complete since the last look
                publish(step, directory)

    def collect(self) -> list[tuple[int, Path]]:
        """Assemble the states complete since the last call."""
        with self._lock:
            rows = read_rows(self.metrics)
            logged = {row["step"] for row in rows}
            found = []
            for step in [step for step in self.pending if step in logged]:
                directory = self._assemble(step, rows)
                if directory is not None:
                    self.pending.remove(step)
                    self.ready[step] = directory
                    found.append((step, directory))
            return found

    def _assemble(self, step: int, rows: list[dict[str, Any]]) -> Path | None:
        source = self.checkpoints / f"step-{step}"
        try:
            json.loads((source / "metadata.json").read_text())
        except (OSError, ValueError):
            return None  # not committed yet
        directory = self.into / f"step-{step}"
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(source, directory / CHECKPOINT)
        fix_checkpoint_timestamp(directory / CHECKPOINT / "metadata.json")
        (directory / METRICS).write_text("".join(json.dumps(row) + "\n" for row in rows if row["step"] <= step))
        (directory / MODEL_FILE).write_text(self.record)
        shutil.copytree(self.tokenizer, directory / TOKENIZER_DIR)
        return directory

    def write(self, out: Path) -> None:
        """Every kept state into the output, once training ended."""
        for step in list(self.pending):
            wait_for_checkpoint(self.checkpoints / f"step-{step}" / "metadata.json")
        self.collect()
        if self.pending:
            raise StepFailed(f"training ended without its checkpoints at steps {self.pending}; see the log")
        for step, directory in self.ready.items():
            shutil.copytree(directory, out / checkpoint_dir(step))
