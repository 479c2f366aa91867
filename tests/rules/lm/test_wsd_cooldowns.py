"""Checkpoints as inputs with Levanter (issue #19, part 2): a run keeps checkpoints, each an
entry of its own, eval_lm evaluates one, train_lm continues from one with a schedule of its own (a
cooldown), and `wsd_cooldowns` of //rules/lm:lm.star builds such a family from one stable
run. Tiny, as tests/rules/lm/test_train_lm.py: a 1-layer, d=32 Llama for 6 steps.

The engine's side (a kept checkpoint published while its run trains, read before the run
ends, the same bytes after a failure) is tests/engine/actions/test_kept_checkpoints.py, with a toy rule.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import build_json, keys, run_cli, statuses
from helpers_lm import TRAIN_TIMEOUT_S, lm_workspace, target_output

PKG = "//exp"
TRAINER = '{"steps": 6, "batch_size": 4, "eval_interval": 3, "checkpoint_interval": 2, "max_eval_batches": 2}'


def _build_file(cooldowns: str = "[[3, 2]]", continued: str = "") -> str:
    return f"""
load("//rules/lm:lm.star", "cpu", "llama", "wsd_cooldowns")
python_corpus(name = "corpus", sample_count = 60, chunk_characters = 1500, validation_fraction = 0.1)
bpe_tokenizer(name = "tokenizer", data = ":corpus", vocab_size = 300)
tokenize(name = "tokens", data = ":corpus", tokenizer = ":tokenizer")
MODEL = llama(hidden = 32, layers = 1, heads = 2, seq_len = 64)
wsd_cooldowns(
    name = "stable",
    data = ":tokens",
    model = MODEL,
    optimizer = {{"learning_rate": 3e-3, "warmup": 2, "min_lr_ratio": 0.0}},
    trainer = {TRAINER},
    cooldowns = {cooldowns},
    resources = cpu(1),
)
# The stable run continued from its checkpoint at step 3 with the stable run's own schedule.
train_lm(
    name = "continued",
    data = ":tokens",
    model = MODEL,
    optimizer = {{"learning_rate": 3e-3, "warmup": 2, "min_lr_ratio": 0.0, "lr_schedule": "constant"}},
    trainer = {TRAINER},
    init_from = ":stable",
    init_step = 3,
    resources = cpu(1),{continued}
)
eval_lm(name = "eval3", model = ":stable", step = 3, data = [":tokens"], max_batches = 2, resources = cpu(1))
"""


def _build(ws: Path, *args: str, store: str | None = None) -> dict:
    rc, out, err = run_cli(ws, "build", "--json", "--jobs", "2", *args, store=store, timeout=TRAIN_TIMEOUT_S)
    assert rc == 0, f"exit {rc}\n{out}\n{err}"
    return json.loads(out) | {"stderr": err}


def _show(ws: Path, what: str, store: str | None = None) -> dict:
    rc, out, err = run_cli(ws, "show", "--json", what, store=store)
    assert rc == 0, err
    return json.loads(out)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_cooldowns_from_a_stable_runs_checkpoint(tmp_path: Path) -> None:
    ws = lm_workspace(tmp_path / "ws", _build_file())
    data = _build(ws, f"{PKG}:all")
    assert set(statuses(data).values()) == {"built"}, data["stderr"]

    # The stable run keeps its checkpoint at step 3 as an entry of its own, with model.json
    # and the metrics up to it, published while it trained, and stored there only.
    stable = target_output(data, f"{PKG}:stable")
    assert not (stable / "checkpoints").exists()
    rc, out, err = run_cli(ws, "where", "--step", "3", f"{PKG}:stable")
    assert rc == 0, err
    kept = Path(out.strip())
    assert (kept / "checkpoint" / "metadata.json").is_file() and (kept / "model.json").is_file()
    assert [row["step"] for row in _rows(kept / "metrics.jsonl")] == [0, 1, 2, 3]
    shown = _show(ws, f"{PKG}:stable")
    state = _show(ws, shown["checkpoints"]["3"])
    assert state["label"] == f"{PKG}:stable at step 3" and state["provenance"]["attempt"] is not None
    assert shown["checkpoint_outputs"]["3"] == str(kept)

    # Continued from step 3 with the stable run's own schedule, a run is the stable run:
    # the same weights, optimizer state, HF export and metrics, byte for byte.
    continued = _show(ws, f"{PKG}:continued")
    mine = {item["path"]: item["blake3"] for item in continued["outputs"]}
    assert mine == {item["path"]: item["blake3"] for item in shown["outputs"]}
    assert continued["tree_digest"] == shown["tree_digest"]
    assert continued["measured"]["continued_from_step"] == 3 and continued["measured"]["first_step_trained"] == 4

    # The cooldown's metrics start with the stable run's (its history), then its learning
    # rate decays where the stable run's stays at the peak.
    cooldown = target_output(data, f"{PKG}:stable_cooldown_3_2")
    rows, stable_rows = _rows(cooldown / "metrics.jsonl"), _rows(stable / "metrics.jsonl")
    assert rows[:4] == stable_rows[:4] and [row["step"] for row in rows] == list(range(6))
    rates = [row["optim/learning_rate"] for row in rows]
    assert rates[-1] < stable_rows[-1]["optim/learning_rate"] and rates[3:] == sorted(rates[3:], reverse=True)
    recipe = _show(ws, f"{PKG}:stable_cooldown_3_2")["recipe"]
    assert recipe["inputs"][f"{PKG}:stable at step 3"]["tree_digest"] == state["tree_digest"]

    evaluated = json.loads((target_output(data, f"{PKG}:eval3") / "metrics.json").read_text())
    logged = next(row for row in stable_rows if row["step"] == 3)  # the training's evaluation at step 3
    assert abs(evaluated["loss"] - logged["eval/loss"]) < 1e-4

    # A changed cooldown, or one more from a step the stable run keeps, reruns only that
    # cooldown: the stable run, and what reads its checkpoint, keep their keys.
    (ws / "exp" / "BUILD.marin").write_text(_build_file(cooldowns="[[3, 3], [3, 2]]"))
    dry = build_json(ws, "--dry-run", f"{PKG}:all")
    assert {label: status for label, status in statuses(dry).items() if status != "cached"} == {
        f"{PKG}:stable_cooldown_3_3": "would-run"
    }
    assert keys(dry)[f"{PKG}:stable"] == keys(data)[f"{PKG}:stable"]
    # Keeping a checkpoint is part of a run's recipe: it trains again.
    (ws / "exp" / "BUILD.marin").write_text(_build_file(continued="\n    keep_checkpoints = [4],"))
    dry = build_json(ws, "--dry-run", f"{PKG}:all")
    assert {label: status for label, status in statuses(dry).items() if status != "cached"} == {
        f"{PKG}:continued": "would-run"
    }


def test_a_cooldown_reads_its_checkpoint_from_the_bucket(tmp_path: Path, gcs_bucket: str) -> None:
    """On a shared store the checkpoint is published to the bucket while the run trains,
    and the cooldown and the evaluation read it there (Levanter reads gs:// in place)."""
    store = f"gs://{gcs_bucket}/team"
    ws = lm_workspace(tmp_path / "ws", _build_file())
    data = _build(ws, f"{PKG}:stable_cooldown_3_2", f"{PKG}:eval3", store=store)
    assert set(statuses(data).values()) == {"built"}, data["stderr"]
    state = _show(ws, _show(ws, f"{PKG}:stable", store)["checkpoints"]["3"], store)
    assert state["provenance"]["attempt"] is not None  # published to the bucket while the stable run trained
    inputs = _show(ws, f"{PKG}:stable_cooldown_3_2", store)["recipe"]["inputs"]
    assert inputs[f"{PKG}:stable at step 3"]["tree_digest"] == state["tree_digest"]
    assert _show(ws, f"{PKG}:eval3", store)["metrics"]["loss"] > 0
