"""experiments/posttrain (issue #30): the tutorial's model exported in Hugging Face format,
fine-tuned with LoRA on a chat set, and scored on a local multiple-choice task before and
after; a mixture of experts of the same size trained beside it on the same tokens and
scored alike — offline, on two CPU cores.

The example's BUILD file is loaded where it is, with the repository's own settings; the
build runs on a copy of it and of the tutorial (whose model and data it names), in a
workspace of their own, once, in one test (so that it is built once whichever xdist
worker runs it): the command lines of docs/tutorial.md's section, run as it shows them
(`marinbuild //experiments/posttrain:all`, then `marinbuild compare ...`), and a second
build that reruns nothing. What each edit of the example's table would rerun is asked of
that built copy with dry runs, which run nothing.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conftest import parse_json_output, run_cli, statuses
from helpers_docs import DOC_COMMANDS
from helpers_workspace import loader_for

from marinbuild.actions.analysis.graph import build_graph, expand_patterns
from marinbuild.labels import parse_pattern

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "experiments/posttrain/BUILD.marin"
TUTORIAL = "experiments/tutorial/BUILD.marin"
PKG = "//experiments/posttrain"
DENSE = "//experiments/tutorial:model"
# The tutorial's targets the example builds (its `eval` is not one of them).
FROM_TUTORIAL = {f"//experiments/tutorial:{name}" for name in ("corpus", "tokenizer", "tokens", "model")}
OWN = ("dense_hf", "chats", "chat", "chat_hf", "moe", "next_line", "eval_before", "eval_after", "eval_moe")
RULES = {
    "dense_hf": "export_hf",
    "chats": "chat_data",
    "chat": "sft_lm",
    "chat_hf": "export_hf",
    "moe": "train_lm",
    "next_line": "mc_task",
    "eval_before": "eval_harness",
    "eval_after": "eval_harness",
    "eval_moe": "eval_harness",
}
# docs/tutorial.md's "Export, fine-tune, evaluate" section: what it tells the reader to run.
BUILD_ALL = (f"{PKG}:all",)
COMPARE = ("compare", DENSE, f"{PKG}:all", "--by", "eval.next_line.acc", "--max")
QUESTIONS = 200
# Training three models and evaluating them, each evaluation starting Levanter and lm-eval:
# some 5 minutes on two idle cores, three times that on a loaded machine.
BUILD_TIMEOUT_S = 2400

# Edits of the example's table, each a line of its text as it is and as a test makes it,
# and the targets each would run again (the others stay cached).
EDITS = {
    "the LoRA rank": (
        '"lora": lora(r = 8, alpha = 1.0),',
        '"lora": lora(r = 4, alpha = 1.0),',
        {"chat", "chat_hf", "eval_after"},
    ),
    "the chats": (
        '"answer_characters": 200,',
        '"answer_characters": 150,',
        {"chats", "chat", "chat_hf", "eval_after"},
    ),
    "the benchmark": (
        f'BENCHMARK = {{"questions": {QUESTIONS},',
        'BENCHMARK = {"questions": 100,',
        {"next_line", "eval_before", "eval_after", "eval_moe"},
    ),
    "the mixture of experts": (
        "MOE = mixtral_nano()",
        "MOE = mixtral_nano(seq_len = 64)",
        {"moe", "eval_moe"},
    ),
}


def _workspace(root: Path) -> Path:
    """A workspace holding copies of the example and of the tutorial, with the repository's
    rule modules."""
    rules = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["marinbuild"]["rules"]
    (root / "marinbuild.toml").write_text(f"rules = {json.dumps(rules)}\n")
    (root / "rules" / "lm").mkdir(parents=True)
    shutil.copy(REPO / "rules" / "lm" / "lm.star", root / "rules" / "lm" / "lm.star")
    for example in (EXAMPLE, TUTORIAL):
        (root / example).parent.mkdir(parents=True)
        shutil.copy(REPO / example, root / example)
    return root


def _attempts(ws: Path) -> int:
    return len(list((ws / "cache" / "attempts").rglob("*.json")))


def _read(built: dict[str, Any], label: str, name: str) -> dict[str, Any]:
    return json.loads((Path(built["by_label"][label]["output"]) / name).read_text())


@contextlib.contextmanager
def _edited(ws: Path, before: str, after: str) -> Iterator[None]:
    """The example with one line edited, put back afterwards."""
    build_file = ws / EXAMPLE
    text = build_file.read_text()
    assert text.count(before) == 1, f"{EXAMPLE} no longer holds {before!r} once"
    build_file.write_text(text.replace(before, after))
    try:
        yield
    finally:
        build_file.write_text(text)


def test_the_tutorial_section_shows_the_command_lines_this_module_runs() -> None:
    """Those of docs/tutorial.md that name the example are the build and the comparison
    run here, word for word (tests/project/test_docs_commands.py parses them with the real CLI)."""
    shown = [command.args for command in DOC_COMMANDS if any(arg.startswith(PKG) for arg in command.args)]
    assert {command.file for command in DOC_COMMANDS if command.args in shown} == {"docs/tutorial.md"}
    assert shown == [BUILD_ALL, COMPARE]


def test_the_example_is_the_tutorials_model_exported_fine_tuned_and_evaluated_beside_a_moe() -> None:
    """The real file, loaded with the repository's settings: every target's rule and input,
    LoRA, the same benchmark for the three models, a Mixtral of the dense model's shape on
    the dense model's tokens; nothing reads the network."""
    loader = loader_for(REPO)  # no package cache: nothing written into the checkout
    graph = build_graph(loader, expand_patterns(loader, [parse_pattern(f"{PKG}:all", "")], ()))
    assert set(graph.targets) == FROM_TUTORIAL | {f"{PKG}:{name}" for name in OWN}
    assert {name: graph.targets[f"{PKG}:{name}"].rule.name for name in OWN} == RULES
    attrs = {name: graph.targets[f"{PKG}:{name}"].attrs for name in OWN}
    assert attrs["dense_hf"]["model"] == DENSE
    assert (attrs["chat"]["model"], attrs["chat"]["data"]) == (f"{PKG}:dense_hf", f"{PKG}:chats")
    assert attrs["chat"]["lora"]["r"] == 8
    assert attrs["chat_hf"]["model"] == f"{PKG}:chat"
    evaluated = {name: attrs[f"eval_{name}"]["model"] for name in ("before", "after", "moe")}
    assert evaluated == {"before": DENSE, "after": f"{PKG}:chat", "moe": f"{PKG}:moe"}
    assert {json.dumps(attrs[f"eval_{name}"]["tasks"]) for name in evaluated} == {json.dumps([f"{PKG}:next_line"])}
    assert attrs["next_line"]["data"] == "//experiments/tutorial:corpus"
    assert attrs["next_line"]["questions"] == QUESTIONS

    dense = graph.targets[DENSE].attrs
    moe = attrs["moe"]
    assert moe["data"] == dense["data"] == "//experiments/tutorial:tokens"
    assert moe["model"]["family"] == "mixtral" and "family" not in dense["model"]
    shape = ("hidden_dim", "num_layers", "num_heads", "num_kv_heads", "seq_len")
    assert {field: moe["model"][field] for field in shape} == {field: dense["model"][field] for field in shape}
    # Active MLP width: 2 experts per token of half the dense model's MLP.
    assert moe["model"]["num_experts_per_tok"] * moe["model"]["intermediate_dim"] == dense["model"]["intermediate_dim"]
    assert (moe["optimizer"], moe["trainer"], moe["seed"]) == (dense["optimizer"], dense["trainer"], dense["seed"])
    # Offline: every rule makes its data here or reads a target's, none fetches any.
    assert {target.rule.name for target in graph.targets.values()} <= {
        "python_corpus",
        "bpe_tokenizer",
        "tokenize",
        "train_lm",
        *RULES.values(),
    }


def test_all_builds_reruns_nothing_then_compares_the_models_and_an_edit_reruns_only_what_reads_it(
    tmp_path: Path,
) -> None:
    """On the copy, in one test (one build, whichever worker runs it): the section's
    `marinbuild //experiments/posttrain:all` builds every target, each model evaluated on
    every question, and a second run reruns nothing; the section's `marinbuild compare`
    shows the three models with their scores; each row of the section's table of edits
    reruns what it says, asked with a dry run."""
    ws = _workspace(tmp_path)
    rc, out, err = run_cli(ws, *BUILD_ALL, timeout=BUILD_TIMEOUT_S)
    assert rc == 0, f"exit {rc}\nstdout:\n{out}\nstderr:\n{err}"
    count = len(FROM_TUTORIAL) + len(OWN)
    assert f"{count} targets: {count} built, 0 cached, 0 failed" in err, err
    attempts = _attempts(ws)
    built = _build_json(ws, BUILD_ALL)
    assert set(statuses(built).values()) == {"cached"} and len(built["targets"]) == count
    assert _attempts(ws) == attempts

    _check_outputs(built)
    _check_compare(ws, built)
    for name, (before, after, rerun) in EDITS.items():
        with _edited(ws, before, after):
            planned = statuses(_build_json(ws, ("--dry-run", *BUILD_ALL)))
        stale = {label.removeprefix(f"{PKG}:") for label, status in planned.items() if status != "cached"}
        assert stale == rerun, (name, planned)


def _build_json(ws: Path, args: tuple[str, ...]) -> dict[str, Any]:
    rc, out, err = run_cli(ws, "build", "--json", *args, timeout=BUILD_TIMEOUT_S)
    assert rc == 0, f"exit {rc}\nstdout:\n{out}\nstderr:\n{err}"
    return parse_json_output(out)


def _check_outputs(built: dict[str, Any]) -> None:
    # The fine-tuning learned to answer: its loss on the assistant's tokens fell.
    chat = _read(built, f"{PKG}:chat", "summary.json")
    assert chat["steps"] == 100 and chat["eval_loss"] < chat["initial_eval_loss"], chat
    # The mixture of experts costs about the dense model's FLOPs per token (its router's besides).
    flops = {label: _read(built, label, "summary.json")["flops"] for label in (DENSE, f"{PKG}:moe")}
    assert 1 <= flops[f"{PKG}:moe"] / flops[DENSE] < 1.01, flops
    for name in ("before", "after", "moe"):
        metrics = _read(built, f"{PKG}:eval_{name}", "metrics.json")
        assert metrics["next_line.samples"] == QUESTIONS and 0 <= metrics["next_line.acc"] <= 1, metrics
    # The fine-tuned model, exported with the chat template it was taught.
    exported = Path(built["by_label"][f"{PKG}:chat_hf"]["output"])
    assert json.loads((exported / "config.json").read_text())["model_type"] == "llama"
    assert "{% generation %}" in (exported / "chat_template.jinja").read_text()


def _check_compare(ws: Path, built: dict[str, Any]) -> None:
    """The section's `marinbuild compare`, as it shows it: a row per model, each with its
    benchmark's scores (those of its evaluation's metrics.json), the best marked."""
    rc, out, err = run_cli(ws, *COMPARE)
    assert rc == 0, err
    runs = [line.lstrip("* ").split()[0] for line in out.splitlines() if line.lstrip("* ").startswith("//")]
    assert sorted(runs) == sorted([DENSE, f"{PKG}:chat", f"{PKG}:moe"]), out
    assert "eval.next_line.acc" in out and "best by eval.next_line.acc (highest)" in out, out

    rc, out, err = run_cli(ws, *COMPARE, "--json")
    assert rc == 0, err
    by_run = {row["run"]: row for row in json.loads(out)["rows"]}
    for run, evaluation in ((DENSE, "eval_before"), (f"{PKG}:chat", "eval_after"), (f"{PKG}:moe", "eval_moe")):
        metrics = _read(built, f"{PKG}:{evaluation}", "metrics.json")
        assert by_run[run]["eval.next_line.acc"] == metrics["next_line.acc"], (run, by_run[run])
        assert by_run[run]["eval.next_line.acc_norm"] == metrics["next_line.acc_norm"]
    best = [row for row in by_run.values() if row["best"]]
    assert best == [max(by_run.values(), key=lambda row: row["eval.next_line.acc"])], by_run
