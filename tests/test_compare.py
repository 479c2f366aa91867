"""The researcher's loop on a tiny sweep: three runs of a learning rate, each evaluated,
compared from the command line and from Python; the best run changed and trained again,
and both its outputs compared (`--history`); the report's evaluation columns shared by
the runs; one run logged to Weights & Biases offline, with a tracker that changes no key;
progress lines on piped output and in the step's log; JAX's compilation cache filled.

One sweep serves all of it (training dominates: about two minutes on two cores).
Before: `show //pkg:all` refused several labels, the report had one column per
evaluation target (`eval_lr1e3.loss`, ...), and a run logged nowhere but its output.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

from conftest import attempt_records, cli_env, keys, run_cli, statuses
from test_rules_lm import PKG, TRAIN_TIMEOUT_S, _workspace

import marinbuild
from marinbuild.provenance.compare import Curve, evaluation_prefixes
from rules.levanter_trackers import run_id

SWEEP = """
load("//rules:lm.star", "llama", "wandb")
python_corpus(name = "corpus", sample_count = 60, chunk_characters = 1500, validation_fraction = 0.1)
bpe_tokenizer(name = "tokenizer", data = ":corpus", vocab_size = 300)
tokenize(name = "tokens", data = ":corpus", tokenizer = ":tokenizer")

def run(name, learning_rate, tracker = None):
    train_lm(
        name = "model_" + name,
        data = ":tokens",
        model = llama(hidden = 32, layers = 1, heads = 2, seq_len = 64),
        optimizer = {{"learning_rate": learning_rate}},
        trainer = {{"steps": 6, "batch_size": 4, "eval_interval": 3, "checkpoint_interval": 2, "max_eval_batches": 2}},
        tracker = tracker,
    )
    eval_lm(name = "eval_" + name, model = ":model_" + name, data = [":tokens"], max_batches = 2)

# A BUILD file may hold loops and functions (docs/concepts.md): the sweep is one of each.
for name, learning_rate, tracker in [("lr1e3", 1e-3, None), ("lr3e3", 3e-3, None), ("lr1e2", {best_lr}, {tracker})]:
    run(name, learning_rate, tracker)
"""
RUNS = [f"{PKG}:model_lr1e3", f"{PKG}:model_lr3e3", f"{PKG}:model_lr1e2"]
BEST = f"{PKG}:model_lr1e2"


def _sweep(best_lr: float = 1e-2, tracker: str = 'wandb(project = "sweep", mode = "offline")') -> str:
    return SWEEP.format(best_lr=best_lr, tracker=tracker)


def _cli(ws: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "marinbuild", "--workspace", str(ws), *args],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=2 * TRAIN_TIMEOUT_S,
        env={**cli_env(), **(env or {})},
    )
    return done.returncode, done.stdout, done.stderr


def _compare(ws: Path, *args: str) -> str:
    rc, out, err = run_cli(ws, "compare", *args)
    assert rc == 0, err
    return out


def test_a_sweep_compared_changed_and_compared_with_its_history(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws", _sweep())
    wandb_dir = tmp_path / "wandb"
    wandb_dir.mkdir()
    offline = {"WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir), "WANDB_SILENT": "true"}
    rc, out, err = _cli(ws, "build", "--json", f"{PKG}:all", env=offline)
    assert rc == 0, err
    built = json.loads(out)
    assert set(statuses(built).values()) == {"built"}
    first_keys = keys(built)

    # Piped output is not silent while a model trains, and its log has a line per few steps.
    assert re.search(rf"{PKG}:model_lr1e3: \d+/6 steps, loss \d", err), err
    rc, log, _ = run_cli(ws, "log", f"{PKG}:model_lr1e3")
    assert rc == 0 and "step 6/6: loss " in log and "eval loss " in log and "tokens/s" in log, log[-2000:]
    # Programs compiled by the first run are in this machine's cache, and the attempt
    # measured the time its first step took.
    assert any((ws / ".marinbuild" / "jax-cache").iterdir())
    shown = json.loads(run_cli(ws, "show", "--json", BEST)[1])
    assert shown["measured"]["time_to_first_step_s"] > 0 and "x cpu" in shown["measured"]["devices"]

    # W&B, offline: the run's directory is on this machine, its id the key's.
    best_key = first_keys[BEST]
    tracker = shown["measured"]["tracker"]
    assert tracker["id"] == run_id(best_key) and tracker["mode"] == "offline" and tracker["project"] == "sweep"
    [run_dir] = (wandb_dir / "wandb").glob(f"offline-run-*-{run_id(best_key)}")
    assert any(run_dir.iterdir())
    # The attempt records the tracker and W&B's environment (not the key's business).
    [record] = attempt_records(ws / "cache", best_key)
    assert record["attrs"]["tracker"] == {"type": "wandb", "project": "sweep", "mode": "offline"}
    assert record["environment"]["WANDB_MODE"] == "offline" and record["environment"]["WANDB_DIR"] == str(wandb_dir)
    # Where a run logs is not what it computes: another tracker, or none, changes no key.
    for other in ('wandb(project = "elsewhere", entity = "team")', "None"):
        (ws / "exp" / "BUILD.marin").write_text(_sweep(tracker=other))
        rc, out, err = run_cli(ws, "build", "--dry-run", "--json", f"{PKG}:all")
        assert rc == 0 and keys(json.loads(out)) == first_keys, err

    # Side by side: only the learning rate differs; the evaluations share their columns.
    table = _compare(ws, f"{PKG}:all", "--by", "eval.loss")
    lines = table.splitlines()
    header = lines[0].split()
    assert "optimizer.learning_rate" in header and "eval.loss" in header and "eval.bpb" in header
    assert not [name for name in header if name.startswith("eval_lr")]
    assert "model.hidden_dim" not in header  # shared: said once, not a column
    summaries = {run: marinbuild.metrics(run, workspace=ws) for run in RUNS}
    evals = {run: marinbuild.metrics(run.replace("model_", "eval_"), workspace=ws) for run in RUNS}
    best = min(RUNS, key=lambda run: evals[run]["loss"])
    assert best == BEST
    # eval_lm evaluates in the batches of the training's own evaluation by default: the
    # same loss and the same bits per byte as the training's summary.
    for run in RUNS:
        assert abs(evals[run]["loss"] - summaries[run]["eval_loss"]) < 1e-6
        assert abs(evals[run]["bpb"] - summaries[run]["eval_bpb"]) < 1e-6
    starred = [line for line in lines[1:4] if line.startswith("*")]
    assert len(starred) == 1 and starred[0].split()[1] == BEST and f"best by eval.loss (lowest): {BEST}" in table

    rows = list(csv.DictReader(io.StringIO(_compare(ws, f"{PKG}:all", "--by", "eval.loss", "--csv"))))
    assert [row["run"] for row in rows][0] == BEST and sorted(row["run"] for row in rows) == sorted(RUNS)
    for row in rows:
        assert float(row["eval.loss"]) == evals[row["run"]]["loss"]
        assert float(row["eval_loss"]) == summaries[row["run"]]["eval_loss"]
    as_json = json.loads(_compare(ws, f"{PKG}:all", "--json"))
    assert as_json["shared"]["model.hidden_dim"] == 32 and "optimizer.learning_rate" not in as_json["shared"]

    # From Python: the same table, for pandas.
    comparison = marinbuild.compare(f"{PKG}:all", by="eval.loss", workspace=ws)
    assert comparison.best["run"] == BEST and len(comparison.rows) == 3
    frame = comparison.to_pandas()
    assert frame.shape[0] == 3 and frame.sort_values("eval.loss")["run"].iloc[0] == BEST
    assert {curve.metric for curve in comparison.curves} == {"train/loss", "eval/loss"}

    # The report's runs table: one set of evaluation columns for the three runs.
    rc, out, err = run_cli(ws, "report", f"{PKG}:all", "-o", str(tmp_path / "report"))
    assert rc == 0, err
    html = Path(out.strip()).read_text()
    runs_table = html[html.index('id="runs-table"') :]
    headers = re.findall(r"<th>([^<]*)</th>", runs_table[: runs_table.index("</thead>")])
    assert headers.count("eval.loss") == 1 and not [name for name in headers if name.startswith("eval_lr")]

    # Change the best run's learning rate: it trains again, and the old best stays comparable.
    (ws / "exp" / "BUILD.marin").write_text(_sweep(best_lr=3e-2))
    rc, out, err = _cli(ws, "build", "--json", BEST, BEST.replace("model_", "eval_"), env=offline)
    assert rc == 0, err
    new_key = keys(json.loads(out))[BEST]
    assert new_key != best_key
    assert len(_compare(ws, f"{PKG}:all", "--csv").splitlines()) == 1 + 3
    history = list(csv.DictReader(io.StringIO(_compare(ws, f"{PKG}:all", "--history", "--by", "eval.loss", "--csv"))))
    assert len(history) == 4
    versions = {row["key"]: row for row in history if row["run"] == BEST}
    assert set(versions) == {best_key[:12], new_key[:12]}
    assert versions[new_key[:12]]["current"] == "True" and versions[best_key[:12]]["current"] == "False"
    assert {row["optimizer.learning_rate"] for row in versions.values()} == {"0.01", "0.03"}
    assert float(versions[best_key[:12]]["eval.loss"]) == evals[BEST]["loss"]  # its own evaluation, found again
    assert all(row["eval.loss"] for row in history)

    # Loss curves: a text plot, or CSV in long form.
    plot = _compare(ws, f"{PKG}:all", "--history", "--curves")
    assert "train/loss (by step)" in plot and "eval/loss (by step)" in plot and f"({new_key[:12]})" in plot
    points = list(csv.DictReader(io.StringIO(_compare(ws, f"{PKG}:all", "--curves", "--csv"))))
    assert {row["run"] for row in points} == set(RUNS)
    assert [int(row["step"]) for row in points if row["run"] == BEST and row["metric"] == "train/loss"] == list(
        range(6)
    )

    rc, _out, err = run_cli(ws, "compare", f"{PKG}:all", "--by", "eval.nonsense")
    assert rc == 2 and "no run has a metric 'eval.nonsense'" in err


def test_evaluations_of_different_runs_share_their_columns() -> None:
    from rules.lm import eval_lm

    def evaluation(model: str, data: list[str], batch_size: int | None = None) -> tuple:
        attrs = {"name": "x", "model": model, "data": data, "batch_size": batch_size, "max_batches": None}
        return ("eval_lm", eval_lm, attrs)

    runs = ["//p:model_a", "//p:model_b"]
    assert evaluation_prefixes(
        {"//p:eval_a": evaluation(runs[0], ["//p:tokens"]), "//p:eval_b": evaluation(runs[1], ["//p:tokens"])}, runs
    ) == {"//p:eval_a": "eval", "//p:eval_b": "eval"}
    # Two kinds of evaluation (other data): a set of columns each, named by their data.
    kinds = {
        "//p:code_a": evaluation(runs[0], ["//p:code"]),
        "//p:prose_a": evaluation(runs[0], ["//p:prose"]),
        "//p:code_b": evaluation(runs[1], ["//p:code"]),
    }
    assert evaluation_prefixes(kinds, runs) == {
        "//p:code_a": "eval[code]",
        "//p:prose_a": "eval[prose]",
        "//p:code_b": "eval[code]",
    }
    # Kinds the data cannot tell apart are named by a target.
    batches = {"//p:b8": evaluation(runs[0], ["//p:tokens"], 8), "//p:b32": evaluation(runs[0], ["//p:tokens"], 32)}
    assert evaluation_prefixes(batches, runs) == {"//p:b8": "eval[b8]", "//p:b32": "eval[b32]"}


def test_a_multi_line_or_long_hyperparameter_stays_on_its_row_of_the_table() -> None:
    """A chat template (several lines, hundreds of characters) differs between two runs: each
    row is one line, the value shown on it cut short with its newlines as \\n; a run's label,
    however long, is shown whole."""
    from marinbuild.cli.records import comparison_lines
    from marinbuild.provenance.compare import Comparison

    template = "{{ bos_token }}{% for message in messages %}\n{{ message['content'] }}\n" + "x" * 300
    long_label = "//experiments/a_package_with_a_long_name:a_run_with_a_long_name_too"
    rows = [
        {"run": long_label, "key": "a" * 12, "chat_template": template, "eval_loss": 5.0},
        {"run": "//p:b", "key": "b" * 12, "chat_template": None, "eval_loss": 6.0},
    ]
    lines = comparison_lines(Comparison(("run", "key", "chat_template", "eval_loss"), rows))
    assert len(lines) == 3 and not any("\n" in line for line in lines), lines  # the header, a line per run
    assert template.replace("\n", "\\n")[:39] + "…  " in lines[1]
    assert lines[1].split()[0] == long_label


def test_loss_curves_as_a_text_plot() -> None:
    from marinbuild.cli.plot import plot_lines

    curves = [
        Curve("//p:a", "a" * 64, "train/loss", (0, 1, 2, 3), (6.0, 5.0, 4.5, 4.0)),
        Curve("//p:b", "b" * 64, "train/loss", (0, 1, 2, 3), (6.0, 5.5, 5.2, 5.0)),
    ]
    lines = plot_lines(curves, width=20, height=6)
    assert lines[0] == "train/loss (by step)" and lines[1].startswith(" 6|") and lines[6].startswith(" 4|")
    assert lines[6].rstrip().endswith("1")  # run 1 ends lowest
    assert "  1  //p:a" in lines and "  2  //p:b" in lines


def test_a_tracker_is_checked_when_the_build_file_loads(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws", _sweep(tracker='{"type": "wandb", "projet": "x"}'))
    rc, _out, err = run_cli(ws, "build", "--dry-run", f"{PKG}:all")
    assert rc == 2 and "tracker: unknown field 'projet'" in err, err
    (ws / "exp" / "BUILD.marin").write_text(_sweep(tracker='"tensorboard"'))
    rc, _out, err = run_cli(ws, "build", "--dry-run", f"{PKG}:all")
    assert rc == 2 and 'tracker: expected "wandb"' in err, err
