"""A mixture swarm through the CLI, on tiny real Levanter runs: what a second build, more
runs and another regression rerun (counted), the weights `compare` shows, and the errors
of bad input at the BUILD line or as a failed step of one line.

The fit and the proposer are tested on known laws in test_regression.py and
test_mixture_fit.py; the whole study at CPU scale is experiments/mixtures (docs/mixtures.md).
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from conftest import build_json, run_cli, statuses
from helpers_lm import lm_workspace
from helpers_workspace import error_line, store_is_untouched

PKG = "//exp"
TRAIN_TIMEOUT_S = 600
CONFIG = 'rules = ["rules.data.decls", "rules.tokenize.decls", "rules.lm.decls", "rules.mixtures.decls"]\n'
MACROS = ("lm/lm.star", "mixtures/mixtures.star")

# Three sources that differ (Python code, English-like words, digits), one tokenizer.
SOURCES = """
load("//rules/lm:lm.star", "cpu", "llama")
load("//rules/mixtures:mixtures.star", "fit_mixture", "mixture_swarm", "validate_mixture")
python_corpus(name = "code", sample_count = 40, chunk_characters = 1500, validation_fraction = 0.1)
text_files(name = "words", srcs = ["words.jsonl"], validation_fraction = 0.1)
text_files(name = "digits", srcs = ["digits.jsonl"], validation_fraction = 0.1)
bpe_tokenizer(name = "tokenizer", data = ":code", vocab_size = 300)
[tokenize(name = c + "_tokens", data = ":" + c, tokenizer = ":tokenizer") for c in ["code", "words", "digits"]]
"""

SWARM = """
swarm = mixture_swarm(
    name = "swarm",
    sources = {{"code": ":code_tokens", "words": ":words_tokens", "digits": ":digits_tokens"}},
    runs = {runs},
    model = llama(hidden = 32, layers = 1, heads = 2, seq_len = 64),
    trainer = {{"steps": 4, "batch_size": 4, "eval_interval": 4, "max_eval_batches": 1}},
    eval = [":code_tokens", ":words_tokens"],
    prior = {prior},
    max_repetition = {max_repetition},
    resources = cpu(cores = 1, memory_gb = 2),
)
law = fit_mixture(name = "law", swarm = swarm, target = {target}, regression = "{regression}", bootstrap = 20)
"""


def _corpus(words: list[str], seed: int) -> str:
    """JSONL documents of `words` in an order fixed by `seed`."""
    lines = []
    for document in range(40):
        text = " ".join(words[(seed * 7 + document * 13 + index * 5) % len(words)] for index in range(120))
        lines.append(json.dumps({"text": text}))
    return "\n".join(lines) + "\n"


def _workspace(root: Path, **fields: object) -> Path:
    settings = {
        "runs": 4,
        "prior": '"uniform"',
        "max_repetition": 4.0,
        "target": '":code_tokens"',
        "regression": "log_linear",
        **fields,
    }
    ws = lm_workspace(root, SOURCES + SWARM.format(**settings), CONFIG, MACROS)
    english = "the a mixture of data trains small models on random weights and fits a law".split()
    (ws / "exp" / "words.jsonl").write_text(_corpus(english, 1))
    (ws / "exp" / "digits.jsonl").write_text(_corpus([str(number) for number in range(100, 160)], 2))
    return ws


def _rewrite(ws: Path, **fields: object) -> None:
    settings = {"runs": 4, "prior": '"uniform"', "max_repetition": 4.0, "target": '":code_tokens"'}
    settings |= {"regression": "log_linear", **fields}
    (ws / "exp" / "BUILD.marin").write_text(SOURCES + SWARM.format(**settings))


def _built(data: dict) -> set[str]:
    return {label for label, status in statuses(data).items() if status == "built"}


def _run(index: int) -> set[str]:
    name = f"{PKG}:swarm-{index:03d}"
    return {f"{name}-mixture", name, f"{name}-eval"}


def test_a_swarm_grows_and_refits_without_training_again(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    first = build_json(ws, f"{PKG}:law")
    assert _built(first) >= set().union(*(_run(index) for index in range(4))) | {f"{PKG}:swarm", f"{PKG}:law"}
    mixtures = {
        index: (Path(first["by_label"][f"{PKG}:swarm-{index:03d}-mixture"]["output"]) / "mixture.json").read_bytes()
        for index in range(4)
    }
    # Each run trained on its own draw, and its summary shows the weights it was given.
    for index in range(4):
        drawn = json.loads(mixtures[index])
        summary = json.loads(
            (Path(first["by_label"][f"{PKG}:swarm-{index:03d}"]["output"]) / "summary.json").read_text()
        )
        for label, weight in drawn["weights"].items():
            assert summary[f"weight.{drawn['names'][label]}"] == weight
    assert len({json.dumps(json.loads(data)["weights"]) for data in mixtures.values()}) == 4

    assert _built(build_json(ws, f"{PKG}:law")) == set()  # a second build reruns nothing

    _rewrite(ws, runs=5)  # one more run: it trains, the table and the fit follow, nothing else
    grown = build_json(ws, f"{PKG}:law")
    assert _built(grown) == _run(4) | {f"{PKG}:swarm", f"{PKG}:law"}
    for index in range(4):  # the first draws are the same mixtures, whatever the swarm's size
        mixture = Path(grown["by_label"][f"{PKG}:swarm-{index:03d}-mixture"]["output"]) / "mixture.json"
        assert mixture.read_bytes() == mixtures[index]
    table = json.loads((Path(grown["by_label"][f"{PKG}:swarm"]["output"]) / "swarm.json").read_text())
    assert [row["run"] for row in table["runs"]] == [f"swarm-{index:03d}" for index in range(5)]
    ratios = list(
        csv.reader(io.StringIO((Path(grown["by_label"][f"{PKG}:swarm"]["output"]) / "ratios.csv").read_text()))
    )
    assert ratios[0] == ["run", "code", "digits", "words"] and len(ratios) == 6

    _rewrite(ws, runs=5, regression="lightgbm")  # another regression: only the fit reruns
    refit = build_json(ws, f"{PKG}:law")
    assert _built(refit) == {f"{PKG}:law"}
    fit = json.loads((Path(refit["by_label"][f"{PKG}:law"]["output"]) / "fit.json").read_text())
    assert fit["regression"] == "lightgbm" and set(fit["compared"]) >= {"log_linear", "lightgbm"}
    assert abs(sum(fit["proposal"]["weights"].values()) - 1) < 1e-5
    assert len(fit["runs"]) == 5 and fit["best_run"]["loss"] == min(run["loss"] for run in fit["runs"])

    # compare: the swarm's runs with their weights as columns.
    runs = sorted(label for index in range(5) for label in _run(index) if not label.endswith("-mixture"))
    rc, out, err = run_cli(ws, "compare", "--csv", "--by", "eval.code_tokens.loss", *runs)
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 5
    assert {"weight.code", "weight.digits", "weight.words", "eval.code_tokens.loss"} <= set(rows[0])
    for row in rows:
        drawn = json.loads(mixtures.get(int(row["run"][-3:]), b"null") or "null")
        if drawn is not None:
            assert float(row["weight.code"]) == drawn["weights"][f"{PKG}:code_tokens"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"prior": '{"code": 1, "prose": 1}'}, 'prior names "prose", which is not a source'),
        ({"runs": 3}, "runs must be at least the number of sources plus one (4)"),
        ({"target": '":digits_tokens"'}, 'target ":digits_tokens" is not among the swarm\'s eval sets'),
        ({"max_repetition": 0}, "max_repetition must be a positive number, got 0"),
        ({"regression": "gp"}, "regression: expected one of log_linear, lightgbm, got 'gp'"),
    ],
)
def test_bad_swarm_input_fails_at_the_build_line(tmp_path: Path, fields: dict, message: str) -> None:
    ws = _workspace(tmp_path / "ws", **fields)
    rc, _out, err = run_cli(ws, "build", f"{PKG}:law")
    assert rc == 2 and "Traceback" not in err, err
    error = error_line(err)
    assert message in error, error
    assert re.search(r"exp/BUILD\.marin:\d+", error), error
    assert store_is_untouched(ws)


def test_a_training_whose_mixture_is_another_targets_needs_its_sources_listed(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    build = (ws / "exp" / "BUILD.marin").read_text()
    (ws / "exp" / "BUILD.marin").write_text(
        build
        + """
train_lm(name = "listed", data = [":code_tokens"], model = llama(hidden = 32, layers = 1, heads = 2, seq_len = 64),
         trainer = {"steps": 4, "batch_size": 4})
"""
    )
    rc, _out, err = run_cli(ws, "build", f"{PKG}:listed")
    assert rc == 2, err
    assert "data lists sources without weights" in error_line(err)
    assert re.search(r"exp/BUILD\.marin:\d+", error_line(err))


def test_foreign_sources_and_caps_without_room_fail_their_step_in_one_line(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws", max_repetition=0.01)
    data = build_json(ws, f"{PKG}:swarm-000-mixture", expect_rc=1)
    assert statuses(data)[f"{PKG}:swarm-000-mixture"] == "failed"
    assert "no mixture fits: a run of 1024 tokens would see the sources" in data["stderr"], data["stderr"]

    build = (ws / "exp" / "BUILD.marin").read_text().replace("max_repetition = 0.01", "max_repetition = 4.0")
    other = 'bpe_tokenizer(name = "other", data = ":words", vocab_size = 280)\n'
    build = build.replace(
        '[tokenize(name = c + "_tokens", data = ":" + c, tokenizer = ":tokenizer") '
        'for c in ["code", "words", "digits"]]',
        other
        + 'tokenize(name = "code_tokens", data = ":code", tokenizer = ":tokenizer")\n'
        + 'tokenize(name = "words_tokens", data = ":words", tokenizer = ":other")\n'
        + 'tokenize(name = "digits_tokens", data = ":digits", tokenizer = ":tokenizer")',
    )
    (ws / "exp" / "BUILD.marin").write_text(build)
    data = build_json(ws, f"{PKG}:swarm-000-mixture", expect_rc=1)
    assert "the sources are token caches of 2 tokenizers (code, digits; words)" in data["stderr"], data["stderr"]

    # A corpus is no token cache.
    (ws / "exp" / "BUILD.marin").write_text(build.replace('"digits": ":digits_tokens"', '"digits": ":digits"'))
    data = build_json(ws, f"{PKG}:swarm-000-mixture", expect_rc=1)
    assert "source digits (//exp:digits) is not a token cache" in data["stderr"], data["stderr"]
