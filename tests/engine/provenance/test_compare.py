"""The researcher's loop on a tiny sweep: three runs of a learning rate, each evaluated,
compared from the command line and from Python; the best run changed and trained again,
and both its outputs compared (`--history`); the report's evaluation columns shared by
the runs; one run logged to Weights & Biases offline, with a tracker that changes no key;
progress lines on piped output and in the step's log; JAX's compilation cache filled.

One sweep serves all of it (training dominates: about two minutes on two cores).
Before: `show //pkg:all` refused several labels, the report had one column per
evaluation target (`eval_lr1e3.loss`, ...), and a run logged nowhere but its output.

What tells runs apart upstream (a threshold two steps before their tokens, mixture weights,
a fine-tuning's base), and evaluation columns named by their data set, are checked on
stand-in steps that each write a file (what `compare` shows depends only on what the store
records), and on docs/report.md's data ablation, two real trainings, as the docs show it.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from conftest import attempt_records, build_json, cli_env, keys, run_cli, statuses, write_files
from helpers_docs import DOC_COMMANDS
from helpers_lm import PKG, TRAIN_TIMEOUT_S, lm_workspace

import marinbuild
from marinbuild.provenance.compare import Curve
from marinbuild.provenance.metrics import evaluation_columns
from rules.common.levanter.trackers import run_id

SWEEP = """
load("//rules/lm:lm.star", "llama", "wandb")
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
    ws = lm_workspace(tmp_path / "ws", _sweep())
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
    # The evaluations are named by their data set, `:tokens`; `--by eval.loss` names its one loss column.
    assert "optimizer.learning_rate" in header and "eval.tokens.loss" in header and "eval.tokens.bpb" in header
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
    assert len(starred) == 1 and starred[0].split()[1] == BEST and f"best by eval.tokens.loss (lowest): {BEST}" in table

    rows = list(csv.DictReader(io.StringIO(_compare(ws, f"{PKG}:all", "--by", "eval.loss", "--csv"))))
    assert [row["run"] for row in rows][0] == BEST and sorted(row["run"] for row in rows) == sorted(RUNS)
    for row in rows:
        assert float(row["eval.tokens.loss"]) == evals[row["run"]]["loss"]
        assert float(row["eval_loss"]) == summaries[row["run"]]["eval_loss"]
    as_json = json.loads(_compare(ws, f"{PKG}:all", "--json"))
    assert as_json["shared"]["model.hidden_dim"] == 32 and "optimizer.learning_rate" not in as_json["shared"]

    # From Python: the same table, for pandas.
    comparison = marinbuild.compare(f"{PKG}:all", by="eval.loss", workspace=ws)
    assert comparison.best["run"] == BEST and len(comparison.rows) == 3
    frame = comparison.to_pandas()
    assert frame.shape[0] == 3 and frame.sort_values("eval.tokens.loss")["run"].iloc[0] == BEST
    assert {curve.metric for curve in comparison.curves} == {"train/loss", "eval/loss"}

    # The report's runs table: one set of evaluation columns for the three runs.
    rc, out, err = run_cli(ws, "report", f"{PKG}:all", "-o", str(tmp_path / "report"))
    assert rc == 0, err
    html = Path(out.strip()).read_text()
    runs_table = html[html.index('id="runs-table"') :]
    headers = re.findall(r"<th>([^<]*)</th>", runs_table[: runs_table.index("</thead>")])
    assert headers.count("eval.tokens.loss") == 1 and not [name for name in headers if name.startswith("eval_lr")]

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
    assert float(versions[best_key[:12]]["eval.tokens.loss"]) == evals[BEST]["loss"]  # its own evaluation, found again
    assert all(row["eval.tokens.loss"] for row in history)

    # Loss curves: a text plot, or CSV in long form.
    plot = _compare(ws, f"{PKG}:all", "--history", "--curves")
    assert "train/loss (by step)" in plot and "eval/loss (by step)" in plot and f"({new_key[:12]})" in plot
    points = list(csv.DictReader(io.StringIO(_compare(ws, f"{PKG}:all", "--curves", "--csv"))))
    assert {row["run"] for row in points} == set(RUNS)
    assert [int(row["step"]) for row in points if row["run"] == BEST and row["metric"] == "train/loss"] == list(
        range(6)
    )

    rc, _out, err = run_cli(ws, "compare", f"{PKG}:all", "--by", "eval.nonsense")
    assert rc == 2 and "no run has a metric or attribute 'eval.nonsense'" in err


def test_eval_lm_and_eval_harness_name_their_numbers_by_what_they_evaluated() -> None:
    """The columns of an evaluation, as its rule declares them (`Rule.evaluated`): eval_lm's
    by data set (docs/rules.md: `sets` by target name), eval_harness's by task, and the
    numbers over several of them by their names joined; one data set or task: one name."""
    from rules.evals.decls import eval_harness
    from rules.lm.decls import eval_lm

    one = {
        "loss": 4.5,
        "bpb": 2.1,
        "perplexity": 90.0,
        "sets": {"tokens": {"loss": 4.5, "bpb": 2.1, "perplexity": 90.0}},
    }
    assert evaluation_columns(eval_lm, "//p:eval", one) == {
        "eval.tokens.loss": 4.5,
        "eval.tokens.bpb": 2.1,
        "eval.tokens.perplexity": 90.0,
    }
    two = {"loss": 4.0, "sets": {"docs_tokens": {"loss": 3.0}, "library_tokens": {"loss": 5.0}}}
    assert evaluation_columns(eval_lm, "//p:eval", two) == {
        "eval.docs_tokens+library_tokens.loss": 4.0,
        "eval.docs_tokens.loss": 3.0,
        "eval.library_tokens.loss": 5.0,
    }
    harness = {"acc": 0.375, "tasks": 2, "next_line.acc": 0.25, "arc_easy.acc": 0.5, "arc_easy.samples": 6}
    assert evaluation_columns(eval_harness, "//p:benchmarks", harness) == {
        "eval.next_line+arc_easy.acc": 0.375,
        "eval.next_line+arc_easy.tasks": 2,
        "eval.next_line.acc": 0.25,
        "eval.arc_easy.acc": 0.5,
        "eval.arc_easy.samples": 6,
    }
    assert (
        evaluation_columns(eval_harness, "//p:after", {"acc": 0.3, "next_line.acc": 0.3})["eval.next_line.acc"] == 0.3
    )


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
    ws = lm_workspace(tmp_path / "ws", _sweep(tracker='{"type": "wandb", "projet": "x"}'))
    rc, _out, err = run_cli(ws, "build", "--dry-run", f"{PKG}:all")
    assert rc == 2 and "tracker: unknown field 'projet'" in err, err
    (ws / "exp" / "BUILD.marin").write_text(_sweep(tracker='"tensorboard"'))
    rc, _out, err = run_cli(ws, "build", "--dry-run", f"{PKG}:all")
    assert rc == 2 and 'tracker: expected "wandb"' in err, err


# -- what tells runs apart, anywhere upstream: stand-in steps, each a file write ------------------

# A data pipeline, a training, a fine-tuning and an evaluation, as fast as writing a file: what
# `compare` and the report show does not depend on what the steps compute, only on what the
# store records of them. The evaluation says what it evaluated (`Rule.evaluated`) as eval_lm does.
STAND_INS = """
import json

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr
from marinbuild.targets.outputs import Curves
from marinbuild.targets.rule import Rule


def _documents(ctx, label):
    return [json.loads(line) for line in (ctx.root(label) / "docs.jsonl").read_text().splitlines()]


def _write(ctx, documents):
    (ctx.out / "docs.jsonl").write_text("".join(json.dumps(document) + "\\n" for document in documents))


def _pages(ctx):
    _write(ctx, [{"text": f"page {ctx.attrs['seed']} {index % 8}", "score": index / 10} for index in range(10)])


def _score(ctx):
    _write(ctx, [doc for doc in _documents(ctx, ctx.attrs["data"]) if doc["score"] >= ctx.attrs["threshold"]])


def _dedup(ctx):
    _write(ctx, list({doc["text"]: doc for doc in _documents(ctx, ctx.attrs["data"])}.values()))


def _tokenize(ctx):
    _write(ctx, _documents(ctx, ctx.attrs["data"]))


def _fit(ctx, data):
    documents = sum(len(_documents(ctx, label)) for label in data)
    rows = [{"step": step, "train/loss": 5.0 - step * documents / 100} for step in range(3)]
    (ctx.out / "metrics.jsonl").write_text("".join(json.dumps(row) + "\\n" for row in rows))
    (ctx.out / "summary.json").write_text(json.dumps({"train_loss": rows[-1]["train/loss"], "documents": documents}))


def _evaluate(ctx):
    trained = json.loads((ctx.root(ctx.attrs["model"]) / "summary.json").read_text())["documents"]
    sets = {
        label.rsplit(":", 1)[1]: {"loss": 4.0 - trained / 100 - len(_documents(ctx, label)) / 1000}
        for label in ctx.attrs["data"]
    }
    loss = sum(found["loss"] for found in sets.values()) / len(sets)
    (ctx.out / "metrics.json").write_text(json.dumps({"loss": loss, "sets": sets}))


def _train(ctx):
    _fit(ctx, ctx.attrs["data"])


def _fine_tune(ctx):
    _fit(ctx, [ctx.attrs["data"]])


def _evaluated(metrics):
    return {"+".join(metrics["sets"]): {"loss": metrics["loss"]}, **metrics["sets"]}


# What makes a step a run, as train_lm declares it: its summary, and its curves.
RUN = {"metrics_file": "summary.json", "curves": Curves("metrics.jsonl", ("train/loss",))}
pages = Rule(name="pages", impl=_pages, attrs={"seed": Attr(types.INT)})
score_cut = Rule(name="score_cut", impl=_score, attrs={"data": Attr(types.LABEL), "threshold": Attr(types.FLOAT)})
dedup_docs = Rule(name="dedup_docs", impl=_dedup, attrs={"data": Attr(types.LABEL)})
tokens = Rule(name="tokens", impl=_tokenize, attrs={"data": Attr(types.LABEL)})
train = Rule(
    name="train",
    impl=_train,
    attrs={
        "data": Attr(types.MIXTURE),
        "model": Attr(types.DICT, default={"hidden": 32, "layers": 2}),
        "learning_rate": Attr(types.FLOAT, default=0.01),
    },
    **RUN,
)
fine_tune = Rule(
    name="fine_tune",
    impl=_fine_tune,
    attrs={"base": Attr(types.LABEL), "data": Attr(types.LABEL), "learning_rate": Attr(types.FLOAT, default=0.001)},
    **RUN,
)
evaluate = Rule(
    name="evaluate",
    impl=_evaluate,
    attrs={"model": Attr(types.LABEL), "data": Attr(types.LABEL_LIST), "batch_size": Attr(types.INT, default=8)},
    metrics_file="metrics.json",
    evaluated=_evaluated,
)
"""

# A data ablation: one chain per threshold, each its own targets (a loop), the threshold two
# steps before the tokens; every model evaluated on the same held-out pages.
ABLATION = """
pages(name = "pages", seed = 1)
pages(name = "heldout", seed = 2)

for name, threshold in [("loose", 0.3), ("strict", {strict})]:
    score_cut(name = "scored_" + name, data = ":pages", threshold = threshold)
    dedup_docs(name = "deduped_" + name, data = ":scored_" + name)
    tokens(name = "tokens_" + name, data = ":deduped_" + name)
    train(name = "model_" + name, data = {{":tokens_" + name: 1.0}})
    evaluate(name = "eval_" + name, model = ":model_" + name, data = [":heldout"])
"""
STAND_IN_RUNS = ("//abl:model_loose", "//abl:model_strict")
THRESHOLD = "abl:scored_*.threshold"


def _stand_ins(make_workspace, **packages: str) -> Path:
    files = {f"{name}/BUILD.marin": text for name, text in packages.items()}
    ws = make_workspace({"stand_ins.py": STAND_INS, **files}, config='rules = ["stand_ins"]\n')
    build_json(ws, *(f"//{name}:all" for name in packages))
    return ws


def _header(table: str) -> list[str]:
    return table.splitlines()[0].split()


def test_runs_that_differ_only_upstream_show_where_in_compare_and_the_report(make_workspace, tmp_path: Path) -> None:
    """Two trainings of one recipe whose data differ only in a threshold two steps before
    their tokens (each threshold its own chain of targets): the threshold is a column,
    named by where it is, in the table, its CSV, its JSON, `--by`, the Python API and the
    report; the rest of the lineage is said to be alike. Before, the table showed nothing
    to tell them apart ("3 hyperparameters are the same in every run")."""
    ws = _stand_ins(make_workspace, abl=ABLATION.format(strict=0.6))
    table = _compare(ws, "//abl:all")
    assert _header(table) == ["run", "key", "built", THRESHOLD, "train_loss", "documents", "eval.heldout.loss"], table
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:3]}
    assert rows["//abl:model_loose"][3] == "0.3" and rows["//abl:model_strict"][3] == "0.6", table
    # Alike upstream: the pages, the chain's other steps, the threshold's step's input.
    assert re.search(r"^\d+ attributes of the 4 targets upstream are the same in every run", table, re.M), table

    rows = list(csv.DictReader(io.StringIO(_compare(ws, "//abl:all", "--csv", "--by", THRESHOLD, "--max"))))
    assert [(row["run"], row[THRESHOLD], row["best"]) for row in rows] == [
        ("//abl:model_strict", "0.6", "True"),
        ("//abl:model_loose", "0.3", "False"),
    ]
    # The attribute's own name is enough where one column has it.
    assert f"best by {THRESHOLD} (lowest): //abl:model_loose" in _compare(ws, "//abl:all", "--by", "threshold")
    as_json = json.loads(_compare(ws, "//abl:all", "--json"))
    assert as_json["shared_upstream"]["abl:pages.seed"] == 1 and as_json["shared"] == {
        "model.hidden": 32,
        "model.layers": 2,
        "learning_rate": 0.01,
    }
    comparison = marinbuild.compare("//abl:all", by=THRESHOLD, workspace=ws)
    assert [row[THRESHOLD] for row in comparison.rows] == [0.3, 0.6] and comparison.best["run"] == STAND_IN_RUNS[0]

    # The report's runs table: the same column, the same values.
    rc, out, err = run_cli(ws, "report", "//abl:all", "-o", str(tmp_path / "report"))
    assert rc == 0, err
    html = Path(out.strip()).read_text()
    runs_table = html[html.index('id="runs-table"') :]
    runs_table = runs_table[: runs_table.index("</table>")]
    headers = re.findall(r"<th>([^<]*)</th>", runs_table)
    assert headers == ["run", "status", THRESHOLD, "train_loss", "documents", "eval.heldout.loss"], headers
    cells = re.findall(
        r'href="steps/[^"]+">([^<]+)</a></td><td>.*?</td><td class="num" data-sort="([^"]+)"', runs_table
    )
    assert sorted(cells) == [("//abl:model_loose", "0.3"), ("//abl:model_strict", "0.6")], runs_table
    assert "attributes of the 4 targets upstream are the same in every run" in html

    # The strict chain cut again, higher: its two outputs, each with the label of its own
    # chain (the same target in both lineages), side by side.
    (ws / "abl" / "BUILD.marin").write_text(ABLATION.format(strict=0.7))
    build_json(ws, "//abl:all")
    history = list(csv.DictReader(io.StringIO(_compare(ws, "//abl:model_strict", "--history", "--csv"))))
    assert [(row["current"], row["abl:scored_strict.threshold"]) for row in history] == [
        ("True", "0.7"),
        ("False", "0.6"),
    ]


def test_compare_shows_no_byte_that_does_not_match_its_manifest(make_workspace) -> None:
    """`compare` tells which runs are built from their entries, without checking every file
    of every output (for a sweep of 1,000 runs of 94 files each, that was most of its time),
    and checks each file it shows against its manifest as it reads it: a run's summary
    altered in the store, to the same size, is never shown (its numbers are blank), while
    the run and its neighbour are still compared."""
    ws = _stand_ins(make_workspace, abl=ABLATION.format(strict=0.7))
    outputs = {label: Path(found["output"]) for label, found in build_json(ws, "//abl:all")["by_label"].items()}
    before = json.loads(_compare(ws, "//abl:all", "--json"))
    true_documents = {row["run"]: row["documents"] for row in before["rows"]}
    summary = outputs["//abl:model_strict"] / "summary.json"
    text = summary.read_text()
    forged = text.replace('"documents": ', '"documents":9')
    assert len(forged) == len(text) and json.loads(forged)["documents"] != true_documents["//abl:model_strict"]
    summary.chmod(0o644)
    summary.write_text(forged)
    after = {row["run"]: row for row in json.loads(_compare(ws, "//abl:all", "--json"))["rows"]}
    assert set(after) == set(STAND_IN_RUNS)
    assert after["//abl:model_strict"]["documents"] is None and after["//abl:model_strict"]["train_loss"] is None
    assert after["//abl:model_loose"]["documents"] == true_documents["//abl:model_loose"]


def test_evaluation_columns_are_named_by_the_data_they_evaluated(make_workspace) -> None:
    """An evaluation's numbers are named by its data set, not by the first evaluation target
    met: two evaluations of one model on the same data are one column, an evaluation on two
    data sets has a column per set and one over both, and `--by eval.loss` names the one
    loss column or says which there are. Before, the columns were `eval[<target>].*`, one
    set per kind of evaluation, and `--by eval.loss` failed."""
    build = (
        ABLATION.format(strict=0.6)
        + """
evaluate(name = "eval_loose_again", model = ":model_loose", data = [":heldout"], batch_size = 16)
"""
    )
    ws = _stand_ins(make_workspace, abl=build)
    table = _compare(ws, "//abl:all", "--by", "eval.loss")
    assert _header(table)[-1] == "eval.heldout.loss" and "best by eval.heldout.loss (lowest)" in table, table
    (ws / "abl" / "BUILD.marin").write_text(
        build + 'evaluate(name = "eval_both", model = ":model_strict", data = [":heldout", ":pages"])\n'
    )
    build_json(ws, "//abl:all")
    as_json = json.loads(_compare(ws, "//abl:all", "--json"))
    evaluations = [name for name in as_json["columns"] if name.startswith("eval")]
    assert evaluations == ["eval.heldout.loss", "eval.heldout+pages.loss", "eval.pages.loss"], as_json["columns"]
    by_run = {row["run"]: row for row in as_json["rows"]}
    assert by_run["//abl:model_loose"]["eval.pages.loss"] is None and by_run["//abl:model_strict"]["eval.pages.loss"]
    rc, _out, err = run_cli(ws, "compare", "//abl:all", "--by", "eval.loss")
    assert rc == 2 and "'eval.loss' could be any of eval.heldout.loss, eval.heldout+pages.loss, eval.pages.loss" in err


def test_what_only_some_runs_have_is_compared_among_those(make_workspace) -> None:
    """A fine-tuning beside the pretraining runs: its rule has no `model`, so the runs'
    shared architecture is no column (before: a column per `model.*` field, empty on the
    fine-tuning's row), and the base run in its lineage is a column of its own. Mixture
    weights that differ are columns, one per data set."""
    tune = """
pages(name = "docs", seed = 1)
pages(name = "library", seed = 2)
train(name = "even", data = {":docs": 0.5, ":library": 0.5})
train(name = "docs_heavy", data = {":docs": 0.8, ":library": 0.2}, learning_rate = 0.02)
fine_tune(name = "tuned", base = ":even", data = ":docs")
"""
    ws = _stand_ins(make_workspace, tune=tune)
    as_json = json.loads(_compare(ws, "//tune:all", "--json"))
    columns = as_json["columns"]
    assert {"learning_rate", "data[tune:docs]", "data[tune:library]", "tune:even"} <= set(columns), columns
    assert not [name for name in columns if name.startswith("model.")]
    assert as_json["shared"]["model.hidden"] == 32
    by_run = {row["run"]: row for row in as_json["rows"]}
    assert by_run["//tune:tuned"]["tune:even"] == "train" and by_run["//tune:even"]["tune:even"] is None
    assert (by_run["//tune:even"]["data[tune:docs]"], by_run["//tune:docs_heavy"]["data[tune:docs]"]) == (0.5, 0.8)
    assert by_run["//tune:tuned"]["learning_rate"] == 0.001


# -- docs/report.md's data ablation, built and compared as it shows ------------------------------

REPO = Path(__file__).resolve().parents[3]
ABLATION_PKG = "//experiments/ablation"
ABLATION_BUILD = "```python\n# experiments/ablation/BUILD.marin\n"
RATIO = "ablation:filtered_*.filters[0].min_alpha_words_ratio"


def _doc_text() -> str:
    return (REPO / "docs" / "report.md").read_text()


def _shown_after(command: str) -> list[str]:
    """The lines docs/report.md shows `command` printing: those after it, to the next command."""
    lines = _doc_text().splitlines()
    start = lines.index(f"$ {command}") + 1
    end = next(index for index in range(start, len(lines)) if lines[index].startswith(("$ ", "```")))
    return lines[start:end]


def test_the_data_ablation_of_the_docs_is_compared_as_they_show(tmp_path: Path) -> None:
    """docs/report.md's ablation: its BUILD file, in a workspace with the repository's rule
    modules, and its command lines run word for word — two real trainings on a corpus cut
    at two thresholds of a filter, two steps before their tokens. The table shows the
    threshold as its one column besides the metrics, with the header and the notes the docs
    show; `--by` the ratio's name sorts by it; the report's runs table has the column."""
    text = _doc_text()
    start = text.index(ABLATION_BUILD) + len(ABLATION_BUILD)
    ws = tmp_path / "ws"
    rules = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["marinbuild"]["rules"]
    write_files(
        ws,
        {
            "marinbuild.toml": f"rules = {json.dumps(rules)}\n",
            "rules/BUILD.marin": "",
            "rules/lm/lm.star": (REPO / "rules" / "lm" / "lm.star").read_text(),
            "experiments/ablation/BUILD.marin": text[start : text.index("```", start)],
        },
    )
    shown = [command for command in DOC_COMMANDS if any(arg.startswith(ABLATION_PKG) for arg in command.args)]
    assert {command.file for command in shown} == {"docs/report.md"} and len(shown) == 4, shown
    printed = {}
    for command in shown:
        rc, out, err = run_cli(ws, *command.args, timeout=4 * TRAIN_TIMEOUT_S)
        assert rc == 0, f"{command}\n{out}\n{err}"
        printed[command.text.removeprefix("$ ")] = out

    table_command = f"marinbuild compare {ABLATION_PKG}:all --by eval.loss"
    table, docs = printed[table_command].splitlines(), _shown_after(table_command)
    assert table[0].split() == docs[0].split(), table  # the columns the docs show
    assert table[0].split()[3] == RATIO
    rows = [line.lstrip("* ").split() for line in table[1:3]]
    assert {row[0]: row[3] for row in rows} == {
        f"{ABLATION_PKG}:model_loose": "0.5",
        f"{ABLATION_PKG}:model_strict": "0.7",
    }, table
    notes = [line for line in docs if line[0].isdigit() or line.startswith("same in every run")]
    assert notes and all(line in table for line in notes), (notes, table)

    by_ratio = list(
        csv.DictReader(io.StringIO(printed[f"marinbuild compare {ABLATION_PKG}:all --by min_alpha_words_ratio --csv"]))
    )
    assert [(row["run"], row[RATIO], row["best"]) for row in by_ratio] == [
        (f"{ABLATION_PKG}:model_loose", "0.5", "True"),
        (f"{ABLATION_PKG}:model_strict", "0.7", "False"),
    ]
    html = (ws / "ablation-report" / "index.html").read_text()
    runs_table = html[html.index('id="runs-table"') :]
    headers = re.findall(r"<th>([^<]*)</th>", runs_table[: runs_table.index("</thead>")])
    assert headers[2] == RATIO and "eval.tokens.loss" in headers, headers
