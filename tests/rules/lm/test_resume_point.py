"""The checkpoint a build announces it resumes from is the one the run resumes from.

Levanter saves a step's checkpoint before that step's metrics line is written (the line
comes once the next step starts, after the step's evaluation), so a kill can leave a
complete checkpoint whose step has no line; the run resumes from the checkpoint before it
(rules/common/training_files.py). `build --dry-run`, `explain` and `build` say so, from the same
decision. The test kills a real training in that window: its evaluation of the whole
validation split, run at each checkpoint's step, keeps the window open for seconds, and
the build is frozen (SIGSTOP) the moment a checkpoint is complete, so that what the kill
leaves is known before it comes. The other tests lay scratch spaces out as such kills do.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

from conftest import run_cli, start_to_kill, statuses
from helpers_lm import PKG, TRAIN_TIMEOUT_S, lm_build, lm_workspace, target_output

from rules.lm.decls import resume_point

STEPS, INTERVAL = 50, 10
# Half of a larger corpus held out for validation: each evaluation (at step 0 and at every
# checkpoint's step, before the next step logs the line) reads hundreds of batches.
BUILD = f"""
load("//rules/lm:lm.star", "llama")
python_corpus(name = "corpus", sample_count = 400, chunk_characters = 1500, validation_fraction = 0.5)
bpe_tokenizer(name = "tokenizer", data = ":corpus", vocab_size = 300)
tokenize(name = "tokens", data = ":corpus", tokenizer = ":tokenizer")
train_lm(
    name = "model",
    data = ":tokens",
    model = llama(hidden = 32, layers = 1, heads = 2, seq_len = 64),
    optimizer = {{"learning_rate": 3e-3}},
    trainer = {{"steps": {STEPS}, "batch_size": 2, "eval_interval": {INTERVAL}, "checkpoint_interval": {INTERVAL}}},
)
"""


def _logged(scratch: Path) -> set[int]:
    metrics = scratch / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True) if metrics.exists() else []
    return {json.loads(line)["step"] for line in lines if line.endswith("\n")}


def _complete(scratch: Path) -> set[int]:
    """The steps of the checkpoints in `scratch` whose metadata.json (written last) is whole."""
    steps = set()
    for metadata in scratch.glob("checkpoints/step-*/metadata.json"):
        try:
            steps.add(json.loads(metadata.read_text())["step"])
        except ValueError:
            continue  # caught while Levanter writes it
    return steps


def _kill_between_a_checkpoint_and_its_line(ws: Path) -> tuple[int, int]:
    """Build the model and kill the build once a complete checkpoint's step has no metrics
    line yet and an earlier checkpoint's has: (the step of that checkpoint, the earlier one's)."""
    build = start_to_kill(ws, "build", f"{PKG}:model")
    seen: set[int] = set()
    deadline = time.monotonic() + TRAIN_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            assert build.poll() is None, "the build ended before a kill could catch a checkpoint without its line"
            scratches = list(ws.glob("cache/scratch/*/*"))
            new = _complete(scratches[0]) - seen if scratches else set()
            if not new:
                time.sleep(0.02)
                continue
            os.killpg(build.pid, signal.SIGSTOP)  # frozen: what the kill will leave is what is read now
            logged, complete = _logged(scratches[0]), _complete(scratches[0])
            newest = max(complete)
            earlier = [step for step in complete if step in logged]
            if newest not in logged and earlier:
                return newest, max(earlier)
            seen |= complete
            os.killpg(build.pid, signal.SIGCONT)  # the line came first this time: wait for the next checkpoint
        raise AssertionError("no checkpoint was caught before its metrics line")
    finally:
        os.killpg(build.pid, signal.SIGKILL)
        build.wait()


def test_a_build_killed_before_a_checkpoints_line_resumes_where_it_says(tmp_path: Path) -> None:
    ws = lm_workspace(tmp_path / "ws", BUILD)
    lm_build(ws, f"{PKG}:tokens")
    unlogged, resumable = _kill_between_a_checkpoint_and_its_line(ws)
    said = f"the checkpoint at step {resumable}"

    rc, out, err = run_cli(ws, "build", "--dry-run", f"{PKG}:model")
    assert rc == 0 and re.search(rf"would-run {PKG}:model .*would resume from {said}\b", out), (unlogged, out)
    rc, out, err = run_cli(ws, "explain", f"{PKG}:model")
    assert rc == 0 and re.search(rf"would resume from {said}\b", out), (unlogged, out)
    data = lm_build(ws, f"{PKG}:model")
    assert statuses(data)[f"{PKG}:model"] == "built"
    assert re.search(rf"resuming {PKG}:model from {said}\b", data["stderr"]), data["stderr"]

    # What it said is what it did: it restored that checkpoint and trained every step after it.
    rc, out, err = run_cli(ws, "show", "--json", f"{PKG}:model")
    assert rc == 0, err
    measured = json.loads(out)["measured"]
    assert (measured["resumed_from_step"], measured["first_step_trained"]) == (resumable, resumable + 1), measured
    rows = (target_output(data, f"{PKG}:model") / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(row)["step"] for row in rows] == list(range(STEPS))  # each step once, none lost


def _scratch(root: Path, complete: dict[int, str], partial: list[int], logged: int, unended: bool = False) -> Path:
    """A scratch space as a killed training leaves it: checkpoints with their metadata.json
    ({step: its text}), checkpoints without (`partial`), and metrics lines for steps 0 to
    `logged` (and, `unended`, the start of the next one's)."""
    for step, metadata in complete.items():
        (root / "checkpoints" / f"step-{step}").mkdir(parents=True)
        (root / "checkpoints" / f"step-{step}" / "metadata.json").write_text(metadata)
    for step in partial:
        (root / "checkpoints" / f"step-{step}" / "model").mkdir(parents=True)
    rows = "".join(json.dumps({"step": step, "train/loss": 1.0}) + "\n" for step in range(logged + 1))
    (root / "metrics.jsonl").write_text(rows + ('{"step": ' if unended else ""))
    return root


def _said(scratch: Path) -> str | None:
    files = [path.relative_to(scratch).as_posix() for path in scratch.rglob("*") if path.is_file()]
    return resume_point(files, lambda name: (scratch / name).read_bytes() if (scratch / name).is_file() else None)


def _metadata(step: int) -> str:
    return json.dumps({"step": step, "timestamp": "2025-01-01T00:00:00", "is_temporary": False})


def test_the_resume_point_is_the_newest_whole_checkpoint_whose_step_was_logged(tmp_path: Path) -> None:
    from rules.common.levanter.training import keep_until_resume_point

    # Killed after the checkpoint at 29, before its line (steps 0 to 24 logged), while 39 was being saved.
    scratch = _scratch(tmp_path / "a", {9: _metadata(9), 19: _metadata(19), 29: _metadata(29)}, [39], 24, True)
    assert _said(scratch) == "the checkpoint at step 19"
    keep_until_resume_point(scratch)  # what the run leaves before Levanter starts
    assert sorted(path.name for path in (scratch / "checkpoints").iterdir()) == ["step-19", "step-9"]
    assert _logged(scratch) == set(range(20)) and _said(scratch) == "the checkpoint at step 19"

    # A metadata.json cut short by the kill: that checkpoint is not whole.
    scratch = _scratch(tmp_path / "b", {9: _metadata(9), 19: _metadata(19)[:10]}, [], 25)
    assert _said(scratch) == "the checkpoint at step 9"
    # Every checkpoint logged, the last step's too: the run is done, and publishes it.
    scratch = _scratch(tmp_path / "c", {9: _metadata(9), 49: _metadata(49)}, [], 49)
    assert _said(scratch) == "the checkpoint at step 49"
    # None logged yet (killed during the first evaluation after its checkpoint): from the start.
    scratch = _scratch(tmp_path / "d", {9: _metadata(9)}, [19], 8)
    assert _said(scratch) is None
    keep_until_resume_point(scratch, [{"step": 0, "train/loss": 2.0}])  # a continuation's history first
    assert not list((scratch / "checkpoints").iterdir()) and _logged(scratch) == {0}
