"""What a training holds where, and which checkpoint it resumes from.

A training (`train_lm`, `sft_lm`) keeps Levanter's checkpoints (`checkpoints/step-N/`,
complete once its `metadata.json`, written last, is there) and its metrics
(`metrics.jsonl`, a line per step) in its key's scratch space, where the next attempt
finds them; its output holds `checkpoint/`, `tokenizer/`, `metrics.jsonl`, `model.json`
and `summary.json`, which eval_lm, export_hf, eval_harness and the scaling fit read.

Levanter saves a step's checkpoint before that step's metrics line is written, so a kill
can leave a complete checkpoint newer than the last line; resuming from it would lose
that line for good. A run resumes instead from the newest complete checkpoint whose step
has its line (`resume_step`), and trains the steps after it again, identically. The rule
calls it on what the store holds, to say where a build would resume before it runs
(`resume_point`); the run calls it on the same files, and Levanter restores that
checkpoint and no other. Cheap to import: no ML library.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from marinbuild.targets.rule import ReadScratch

# In a training's scratch space.
CHECKPOINTS = "checkpoints"
METRICS = "metrics.jsonl"
# In its output (and in each state it keeps), besides metrics.jsonl and summary.json
# (rules/common/corpus.py: every step's summary numbers).
CHECKPOINT = "checkpoint"
TOKENIZER_DIR = "tokenizer"
MODEL_FILE = "model.json"  # the model config, its tokenizer's digest, how it was evaluated
_METADATA = re.compile(rf"{CHECKPOINTS}/step-(\d+)/metadata\.json")


def checkpoint_path(step: int) -> str:
    """Where a training's scratch space holds its checkpoint of `step`."""
    return f"{CHECKPOINTS}/step-{step}"


def written_rows(text: str) -> list[dict[str, Any]]:
    """The rows of a metrics file's text: a line not ended (being written, or cut by a kill) is none."""
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def resume_step(files: Iterable[str], read: ReadScratch) -> int | None:
    """The step of the checkpoint the next attempt of a training resumes from, given the
    files of its scratch space (paths relative to it) and `read` of one: the newest
    complete checkpoint (its metadata.json there and readable) whose step's metrics line
    was written; None: it starts afresh."""
    complete = sorted((int(match[1]) for name in files if (match := _METADATA.fullmatch(name))), reverse=True)
    if not complete:
        return None
    logged = {row["step"] for row in written_rows((read(METRICS) or b"").decode("utf-8", errors="replace"))}
    return next((step for step in complete if step in logged and _readable(read, step)), None)


def _readable(read: ReadScratch, step: int) -> bool:
    """Whether the metadata of the checkpoint of `step` is whole (a kill may cut its writing)."""
    try:
        return json.loads(read(f"{checkpoint_path(step)}/metadata.json") or b"")["step"] == step
    except (ValueError, KeyError, TypeError):
        return False
