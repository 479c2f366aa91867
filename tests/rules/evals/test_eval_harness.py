"""mc_task and eval_harness through the CLI: lm-evaluation-harness tasks on a tiny model,
offline.

The model is test_train_lm.py's tiny Llama (1 layer, d=32, 64-token sequences), evaluated
on a next-line task made from its own corpus (`mc_task`) and on lm-eval's `arc_easy`, its
data a few questions in ARC's format written here; the same weights exported to Hugging
Face format and read back (`hf_model`) score the same. Nothing reaches the Hub: the steps
run with HF_HUB_OFFLINE=1 and HF_DATASETS_OFFLINE=1.
"""

from __future__ import annotations

import json
import random
import tomllib
from pathlib import Path

import lm_eval
import pytest
from conftest import run_cli
from helpers_hf import DATA, EXPORTED_MODEL
from helpers_lm import TRAIN_TIMEOUT_S, lm_workspace
from helpers_workspace import assert_bad_declarations

from marinbuild.targets.context import StepFailed
from rules.evals.constants import LM_EVAL_VERSION
from rules.evals.mc_task import next_line_questions

REPO = Path(__file__).resolve().parents[3]
CONFIG = 'rules = ["rules.data.decls", "rules.tokenize.decls", "rules.lm.decls", "rules.evals.decls"]\n'
# Six questions in the format of lm-eval's arc_easy (allenai/ai2_arc), its test split only.
ARC = [
    ("Which is a liquid at room temperature?", ["water", "iron", "salt", "wood"], "A"),
    ("What do plants need to make food?", ["sand", "sunlight", "plastic", "noise"], "B"),
    ("Which animal lays eggs?", ["dog", "cat", "chicken", "horse"], "C"),
    ("What is frozen water called?", ["steam", "ice", "mud", "air"], "B"),
    ("Which planet do we live on?", ["Mars", "Venus", "Earth", "Jupiter"], "C"),
    ("What gives us light in the day?", ["the Moon", "the Sun", "a lamp", "the stars"], "B"),
]
ARC_ROWS = "".join(
    json.dumps({"id": f"q{i}", "question": q, "choices": {"text": c, "label": list("ABCD")}, "answerKey": a}) + "\n"
    for i, (q, c, a) in enumerate(ARC)
)
BUILD = f"""
{EXPORTED_MODEL}hf_model(name = "base", dir = ":export")
mc_task(name = "next_line", data = ":corpus", questions = 12, fewshot_examples = 4)
filegroup(name = "arc", srcs = ["arc/test.jsonl"])
TASKS = [":next_line", {{"task": "arc_easy", "data": ":arc"}}]
eval_harness(name = "harness", model = ":model", tasks = TASKS)
eval_harness(name = "harness_hf", model = ":base", tasks = [":next_line"])
eval_harness(name = "few_shot", model = ":model", step = 3, tasks = [":next_line"], num_fewshot = 2, limit = 5)
eval_harness(name = "misnamed", model = ":model", tasks = [{{"task": "arc_eazy", "data": ":arc"}}])
eval_harness(name = "not_a_task", model = ":model", tasks = [":arc"])
"""
# The first build trains, exports and evaluates 4 times, each evaluation starting Levanter
# and lm-eval (indexing lm-eval's own tasks takes some 20 s): minutes on a loaded machine.
BUILD_TIMEOUT_S = 900


def _build(ws: Path, *args: str, expect_rc: int = 0) -> dict:
    rc, out, err = run_cli(ws, "build", "--json", *args, timeout=BUILD_TIMEOUT_S)
    assert rc == expect_rc, f"exit {rc}\n{out}\n{err}"
    return {item["label"]: item for item in json.loads(out)["targets"]} | {"stderr": err}


def _metrics(data: dict, label: str) -> dict:
    return json.loads((Path(data[label]["output"]) / "metrics.json").read_text())


def test_eval_harness_on_a_local_task_and_an_lm_eval_task(tmp_path: Path) -> None:
    ws = lm_workspace(tmp_path / "ws", DATA + BUILD)
    (ws / "marinbuild.toml").write_text(CONFIG)
    (ws / "exp" / "arc").mkdir()
    (ws / "exp" / "arc" / "test.jsonl").write_text(ARC_ROWS)
    data = _build(ws, "--keep-going", "//exp:all", expect_rc=1)

    # The local task: the corpus's lines, questions from its validation documents.
    task = Path(data["//exp:next_line"]["output"])
    questions = [json.loads(line) for line in (task / "test.jsonl").read_text().splitlines()]
    assert len(questions) == 12 and all(len(q["choices"]) == 4 and 0 <= q["answer"] < 4 for q in questions)
    assert all(q["choices"][q["answer"]] not in q["choices"][: q["answer"]] for q in questions)
    assert len((task / "train.jsonl").read_text().splitlines()) == 4

    # Every question of both tasks scored, each metric a fraction of them; the average is the tasks' mean.
    metrics = _metrics(data, "//exp:harness")
    assert (metrics["tasks"], metrics["samples"], metrics["next_line.samples"], metrics["arc_easy.samples"]) == (
        2,
        18,
        12,
        6,
    )
    for name, count in (("next_line", 12), ("arc_easy", 6)):
        for metric in ("acc", "acc_norm"):
            assert 0 <= metrics[f"{name}.{metric}"] <= 1
            assert abs(metrics[f"{name}.{metric}"] * count - round(metrics[f"{name}.{metric}"] * count)) < 1e-9
    assert abs(metrics["acc"] - (metrics["next_line.acc"] + metrics["arc_easy.acc"]) / 2) < 1e-12

    # The same weights in Hugging Face format score the same. The state kept at step 3, few-shot, limited.
    hf = _metrics(data, "//exp:harness_hf")
    assert (hf["tasks"], hf["samples"]) == (1, 12)
    assert all(abs(hf[f"next_line.{name}"] - metrics[f"next_line.{name}"]) < 1e-9 for name in ("acc", "acc_norm"))
    few = _metrics(data, "//exp:few_shot")
    assert (few["tasks"], few["samples"]) == (1, 5) and 0 <= few["acc"] <= 1

    # An unknown task, or a target that holds none, fails its step in one line, before any model is loaded.
    assert data["//exp:misnamed"]["status"] == data["//exp:not_a_task"]["status"] == "failed"
    assert data["//exp:misnamed"]["reason"] == (
        f"lm-eval {LM_EVAL_VERSION} has no task named 'arc_eazy'; did you mean arc_easy, arc_eu_easy, arc_ca_easy?"
    )
    assert data["//exp:not_a_task"]["reason"] == (
        "//exp:arc holds 0 task.yaml files: a local task is one directory holding an lm-eval task.yaml and its "
        "data (an mc_task target)"
    )
    assert "Traceback" not in data["stderr"]

    # A second build reruns nothing; a build of the evaluation prints its headline.
    rc, out, err = run_cli(ws, "//exp:all", "-//exp:misnamed", "-//exp:not_a_task", timeout=TRAIN_TIMEOUT_S)
    assert rc == 0 and "0 built, 11 cached" in err, err
    rc, out, err = run_cli(ws, "//exp:harness")
    assert rc == 0 and "0 built, 7 cached" in err, err
    assert f"acc {metrics['acc']:.3f}, acc_norm {metrics['acc_norm']:.3f} (mean over 2 tasks, 18 questions" in out

    # show: the metrics, and lm-eval's version in the recipe (so in the key).
    rc, out, err = run_cli(ws, "show", "//exp:harness")
    assert rc == 0, err
    assert (
        f"next_line.acc: {metrics['next_line.acc']}" in out
        and f"arc_easy.acc_norm: {metrics['arc_easy.acc_norm']}" in out
    )
    assert f'lm_eval_version = "{LM_EVAL_VERSION}"' in out

    # compare and the report: the evaluations' numbers beside the run's, as eval_lm's are.
    rc, out, err = run_cli(ws, "compare", "--json", "//exp:model", "//exp:harness")
    assert rc == 0, err
    (row,) = json.loads(out)["rows"]
    # Named by task (`Rule.evaluated`); the means over the two tasks by both their names.
    both = "+".join(dict.fromkeys(name.rpartition(".")[0] for name in metrics if "." in name))
    assert both in ("next_line+arc_easy", "arc_easy+next_line")
    named = {f"eval.{name if '.' in name else f'{both}.{name}'}": value for name, value in metrics.items()}
    assert {name: row[name] for name in named} == named and row["eval_loss"] > 0
    rc, _out, err = run_cli(ws, "report", "//exp:model", "//exp:harness", "-o", str(tmp_path / "report"))
    assert rc == 0, err
    html = (tmp_path / "report" / "index.html").read_text()
    assert "eval.next_line.acc" in html and "eval.arc_easy.acc_norm" in html


def test_eval_harness_attributes_are_checked_at_load(make_workspace) -> None:
    cases = [
        ('eval_harness(name = "m", model = ":d", tasks = [":d"], limit = 0)', "limit must be at least 1"),
        ('eval_harness(name = "m", model = ":d", tasks = [":d"], num_fewshot = -1)', "num_fewshot must be 0 or more"),
        ('eval_harness(name = "m", model = ":d", tasks = [])', "attribute 'tasks': expected a non-empty list"),
        (
            'eval_harness(name = "m", model = ":d", tasks = [{"task": "arc easy", "data": ":d"}])',
            "attribute 'tasks': 'arc easy' is not an lm-eval task name",
        ),
        (
            'eval_harness(name = "m", model = ":d", tasks = [{"task": "arc_easy"}])',
            "attribute 'tasks': expected a label",
        ),
        ('eval_harness(name = "m", model = ":d", tasks = [":d", ":d"])', "attribute 'tasks': listed twice"),
        ('eval_harness(name = "m", model = ":d", tasks = [":d"], step = 0)', "step: Levanter keeps no checkpoint"),
        (
            'eval_harness(name = "m", model = ":d", tasks = [":d"], lm_eval_version = "0.4.0")',
            f"lm_eval_version is set by marinbuild to the lm-eval it runs ({LM_EVAL_VERSION})",
        ),
        ('mc_task(name = "m", data = ":d", choices = 1)', "choices must be at least 2"),
        ('mc_task(name = "m", data = ":d", questions = 0)', "questions must be at least 1"),
    ]
    assert_bad_declarations(make_workspace, cases, config=CONFIG)


def test_lm_eval_version_is_the_installed_and_pinned_one() -> None:
    """The version in the key is the one that runs: pyproject.toml's pin, installed."""
    pins = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"lm-eval=={LM_EVAL_VERSION}" in pins
    assert lm_eval.__version__ == LM_EVAL_VERSION


def test_next_line_questions_are_drawn_from_the_documents_by_the_seed() -> None:
    documents = ["a = 1\nb = 2\n\nc = 3\nd = 4\n", "def f():\n    return 5\nx = f()\n"]
    lines = [[line for line in document.splitlines() if line.strip()] for document in documents]
    first = next_line_questions(documents, 3, 2, 4, random.Random(7))
    assert first == next_line_questions(documents, 3, 2, 4, random.Random(7))
    assert first != next_line_questions(documents, 3, 2, 4, random.Random(8))
    for question in first:
        context, answer = question["context"].splitlines(), question["choices"][question["answer"]]
        assert any(
            found[end - 2 : end] == context and found[end] == answer for found in lines for end in range(2, len(found))
        ), question
        assert len(set(question["choices"])) == 4
    with pytest.raises(StepFailed, match="the documents have 3 places for a question of 2 lines of context"):
        next_line_questions(documents, 4, 2, 4, random.Random(7))
