"""train_lm and eval_lm end to end through the CLI: a tiny Llama on a tiny corpus.

Kept small for CI (a 1-layer, d=32 model on 64-token sequences; Levanter's setup and
compilation dominate). What reruns after an edit is checked with --dry-run, which
computes the same keys as a build without paying for one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from conftest import build_json, keys, run_cli, start_to_kill, statuses
from helpers_lm import (
    PKG,
    TRAIN_TIMEOUT_S,
    lm_build,
    lm_build_file,
    lm_workspace,
    target_output,
    wait_for_checkpoint,
)

import marinbuild
from marinbuild.provenance.rerun import check_outputs
from marinbuild.session import Session
from rules.lm.decls import train_lm


def test_train_and_evaluate_a_tiny_model(tmp_path: Path) -> None:
    ws = lm_workspace(tmp_path / "ws", lm_build_file())
    data = lm_build(ws, f"{PKG}:all")
    assert set(statuses(data).values()) == {"built"}

    model = target_output(data, f"{PKG}:model")
    summary = json.loads((model / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["tokens"] == 6 * 4 * 64
    assert summary["eval_loss"] < summary["initial_eval_loss"]
    assert (model / "checkpoint" / "metadata.json").is_file()
    assert {"config.json", "tokenizer.json"} <= {p.name for p in (model / "tokenizer").iterdir()}
    assert not (model / "hf").exists()  # export_hf makes that (tests/rules/lm/test_hf_model.py)
    rows = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == list(range(6)) and all("train/loss" in row for row in rows)

    metrics = json.loads((target_output(data, f"{PKG}:eval") / "metrics.json").read_text())
    assert metrics["perplexity"] > 1 and metrics["bpb"] > 0
    assert abs(metrics["sets"]["tokens"]["loss"] - metrics["loss"]) < 1e-4

    # A second build reruns nothing and prints the headlines.
    rc, out, err = run_cli(ws, f"{PKG}:all")
    assert rc == 0 and "0 built, 5 cached" in err, err
    assert f"eval loss {summary['eval_loss']:.3f} (at initialisation" in out

    # `show` prints the effective config: the defaults the BUILD file left out included
    # (rules/common/lm_config.py), as recorded in model.json for eval_lm.
    rc, out, err = run_cli(ws, "show", f"{PKG}:model")
    assert rc == 0 and '"weight_decay": 0.1' in out and '"activation_function": "silu"' in out, out + err
    recorded = json.loads((model / "model.json").read_text())["model"]
    assert recorded["num_layers"] == 1 and recorded["activation_function"] == "silu"

    # From Python, without building: the verified output and the summary metrics.
    assert marinbuild.output(f"{PKG}:model", workspace=ws) == model
    assert marinbuild.metrics(f"{PKG}:model", workspace=ws) == summary

    # Run it again aside, from the stored recipe: the metrics agree within the rule's
    # tolerance (training is bit-identical on CPU with a fixed seed).
    key = next(item["key"] for item in data["targets"] if item["label"] == f"{PKG}:model")
    rc, out, err = run_cli(ws, "rerun", "--check", key, timeout=TRAIN_TIMEOUT_S)
    assert rc == 0 and "matches the stored output (metrics)" in out, out + err
    # Another seed is another model: compared as if it were a rerun, its metrics differ.
    (ws / "exp" / "BUILD.marin").write_text(lm_build_file(seed=1))
    other = target_output(lm_build(ws, f"{PKG}:model"), f"{PKG}:model")
    report = check_outputs(Session.open(ws, cwd=ws).cache, train_lm, key, other)
    assert report.compared == "metrics" and {line.split(":")[0] for line in report.differences} >= {
        "train_loss",
        "eval_loss",
    }

    # What an edit reruns: resources nothing; the learning rate training and evaluation;
    # the corpus size everything downstream of the data.
    (ws / "exp" / "BUILD.marin").write_text(lm_build_file(resources='gpu("H100", 8)'))
    assert set(statuses(build_json(ws, f"{PKG}:all")).values()) == {"cached"}
    (ws / "exp" / "BUILD.marin").write_text(lm_build_file(lr=1e-3))
    dry = statuses(build_json(ws, "--dry-run", f"{PKG}:all"))
    assert dry == {
        f"{PKG}:corpus": "cached",
        f"{PKG}:tokenizer": "cached",
        f"{PKG}:tokens": "cached",
        f"{PKG}:model": "would-run",
        f"{PKG}:eval": "pending",
    }
    (ws / "exp" / "BUILD.marin").write_text(lm_build_file(sample_count=50))
    dry = statuses(build_json(ws, "--dry-run", f"{PKG}:all"))
    assert dry[f"{PKG}:corpus"] == "would-run" and {
        dry[f"{PKG}:{name}"] for name in ("tokenizer", "tokens", "model", "eval")
    } == {"pending"}


def test_bad_attributes_fail_at_load(tmp_path: Path) -> None:
    ws = lm_workspace(tmp_path / "ws", lm_build_file(trainer='{"steps": 6, "epochs": 2}'))
    rc, _out, err = run_cli(ws, "build", f"{PKG}:model")
    assert rc == 2 and "BUILD.marin:6" in err and "attribute 'trainer': unknown field 'epochs'" in err, err
    (ws / "exp" / "BUILD.marin").write_text('eval_lm(name = "eval", model = ":model", data = [])\n')
    rc, _out, err = run_cli(ws, "build", f"{PKG}:eval")
    assert rc == 2 and "BUILD.marin:1" in err and "name at least one tokenize target" in err, err


# A cooldown of the resume test's run, from the checkpoint it keeps at step 9.
_COOLDOWN = """
train_lm(
    name = "cooldown",
    data = ":tokens",
    model = llama(hidden = 32, layers = 1, heads = 2, seq_len = 64),
    optimizer = {"learning_rate": 3e-3, "lr_schedule": "linear", "decay": 20},
    trainer = {"steps": 30, "batch_size": 2, "max_eval_batches": 1},
    init_from = ":model",
    init_step = 9,
)
"""


def test_killed_training_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    trainer = '{"steps": 300, "batch_size": 2, "eval_interval": 1000, "checkpoint_interval": 10, "max_eval_batches": 1}'
    ws = lm_workspace(tmp_path / "ws", lm_build_file(trainer=trainer, keep="[9]") + _COOLDOWN)
    lm_build(ws, f"{PKG}:tokens")

    build = start_to_kill(ws, "build", f"{PKG}:model")
    try:
        # Killed once the second checkpoint is saved: the first one's step is logged by then.
        # The kept checkpoint at step 9 was published while it trained (issue #19, part 3).
        kept = _wait_for_entry(ws / "cache", f"{PKG}:model at step 9", build)
        wait_for_checkpoint(ws / "cache" / "scratch", build, at_least=19)
    finally:
        os.killpg(build.pid, signal.SIGKILL)
        build.wait()

    # Every command says the next build resumes, before it runs.
    rc, out, err = run_cli(ws, "build", "--dry-run", f"{PKG}:model")
    assert rc == 0 and re.search(rf"would-run {PKG}:model .*would resume from the checkpoint at step \d+", out), out
    rc, out, err = run_cli(ws, "explain", f"{PKG}:model")
    assert rc == 0 and "would resume from the checkpoint at step" in out, out
    data = lm_build(ws, f"{PKG}:model")
    assert statuses(data)[f"{PKG}:model"] == "built"
    assert re.search(rf"resuming {PKG}:model from the checkpoint at step \d+", data["stderr"]), data["stderr"]
    model = target_output(data, f"{PKG}:model")
    rc, out, err = run_cli(ws, "show", "--json", f"{PKG}:model")
    assert rc == 0, err
    measured = json.loads(out)["measured"]
    resumed = measured["resumed_from_step"]
    assert resumed is not None and resumed >= 9
    # The steps up to the checkpoint were not trained again: this attempt started after it.
    assert measured["first_step_trained"] == resumed + 1 and measured["steps_trained"] == 299 - resumed
    rows = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == list(range(300))  # each step once, none lost to the kill

    # Resumed or not, the same recipe gives the same bytes: a run never interrupted
    # publishes the same tree (weights, optimizer state, metrics), so dependents keep their keys.
    uninterrupted = lm_workspace(tmp_path / "uninterrupted", lm_build_file(trainer=trainer, keep="[9]") + _COOLDOWN)
    again = lm_build(uninterrupted, f"{PKG}:model")
    assert keys(again)[f"{PKG}:model"] == keys(data)[f"{PKG}:model"]
    shown = json.loads(run_cli(uninterrupted, "show", "--json", f"{PKG}:model")[1])
    assert shown["tree_digest"] == json.loads(out)["tree_digest"]
    # The checkpoint kept at step 9 before the kill holds what the uninterrupted run keeps
    # there: what read it early read the same bytes.
    assert shown["checkpoints"]["9"] == kept["key"]
    rc, out, err = run_cli(uninterrupted, "show", "--json", kept["key"])
    assert rc == 0, err
    theirs = {item["path"]: item["blake3"] for item in json.loads(out)["outputs"]}
    assert theirs and {item["path"]: item["blake3"] for item in kept["files"]} == theirs
    # So a cooldown from step 9 of the killed run is the cooldown from step 9 of the
    # uninterrupted one: the same key, made of the same checkpoint's digest.
    cooldowns = [keys(build_json(where, "--dry-run", f"{PKG}:cooldown")) for where in (ws, uninterrupted)]
    assert cooldowns[0][f"{PKG}:cooldown"] == cooldowns[1][f"{PKG}:cooldown"] is not None


def _wait_for_entry(store: Path, label: str, build: subprocess.Popen, timeout: float = TRAIN_TIMEOUT_S) -> dict:
    """The action-cache entry published under `label` (a kept checkpoint's name) while `build` runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert build.poll() is None, f"the build ended before it published {label}"
        for path in store.glob("ac/*/*.json"):
            entry = json.loads(path.read_text())
            if entry["label"] == label:
                return entry
        time.sleep(0.05)
    raise AssertionError(f"no entry for {label} appeared")
