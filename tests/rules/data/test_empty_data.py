"""Empty data stops at the step that made it empty (issue #36): a data step that removes
every document of a split fails with one line naming what removed them, and publishes
nothing; a corpus whose split was already empty fails the first step that cannot use it
(tokenize) at its start, never Levanter later with an IndexError. The quality threshold's
case, on the real example, is tests/experiments/test_datamix.py."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli

MODULES = ["rules.data.decls", "rules.tokenize.decls", "rules.webdata.decls"]
RULES = f"rules = {json.dumps(MODULES)}\n"
LONG = [
    "The cat sat on the mat and looked at the birds that flew over the garden wall at dusk.",
    "A river runs through the valley and the people of the town fish in it every day of the year.",
    "The library opens at nine and closes at five, and the children read there after school.",
]
SHORT = ["far too short", "short again"]


def _shard(*texts: str) -> str:
    return "".join(json.dumps({"text": text}) + "\n" for text in texts)


def _workspace(make_workspace, build: str, train: list[str], validation: list[str]) -> Path:
    """A corpus in the layout of every data rule (train/, validation/, summary.json) and `build`."""
    documents = {"train": len(train), "validation": len(validation)}
    files = {
        "p/BUILD.marin": 'filegroup(name = "raw", srcs = glob(["corpus/**"]))\n' + build,
        "p/corpus/summary.json": json.dumps({"documents": documents}) + "\n",
        "p/corpus/train/shard-00000.jsonl": _shard(*train),
        "p/corpus/validation/shard-00000.jsonl": _shard(*validation),
    }
    return make_workspace(files, RULES)


def _failed(ws: Path, label: str) -> str:
    """Build `label`: it fails (exit 1); the one line of its failure, nothing published."""
    rc, out, err = run_cli(ws, "build", label)
    assert rc == 1, f"exit {rc}\n{out}\n{err}"
    [line] = [line for line in err.splitlines() if line.startswith("[") and f"] failed {label}: " in line]
    assert "Traceback" not in err and "Error" not in line, err
    rc, _out, err = run_cli(ws, "where", label)
    assert rc == 2, "a failed step publishes nothing"
    return line.partition(f"failed {label}: ")[2]


FILTERS = """
filter_text(name = "filtered", data = ":raw", filters = [{{"name": "gopher_quality", "min_words": {min_words}}}])
bpe_tokenizer(name = "tok", data = ":raw", vocab_size = 300)
tokenize(name = "tokens", data = ":filtered", tokenizer = ":tok")
"""


def test_filters_that_reject_every_document_fail_their_step_in_one_line(make_workspace):
    ws = _workspace(make_workspace, FILTERS.format(min_words=500), LONG, LONG[:2])
    assert _failed(ws, "//p:filtered") == "the filters rejected all 5 documents (gopher_quality 5)"
    rc, _out, err = run_cli(ws, "build", "//p:tokens")
    assert rc == 1 and "skipped //p:tokens: dependency //p:filtered failed" in err, err


def test_filters_that_empty_the_validation_split_fail_their_step_and_say_why_it_matters(make_workspace):
    ws = _workspace(make_workspace, FILTERS.format(min_words=5), LONG, SHORT)
    assert _failed(ws, "//p:filtered") == (
        "the filters rejected all 2 validation documents (gopher_quality 2): train_lm and eval_lm evaluate on "
        "the validation split (a larger validation_fraction where the corpus is split holds out more)"
    )


def test_dedup_that_removes_every_validation_document_fails_its_step(make_workspace):
    build = 'dedup(name = "deduped", data = [":raw"], fuzzy = False)\n'
    ws = _workspace(make_workspace, build, LONG, [LONG[0], " " + LONG[1]])  # the same texts, laid out apart
    assert _failed(ws, "//p:deduped").startswith("dedup removed all 2 validation documents (exact duplicates 2): ")


def test_tokenize_of_a_corpus_without_validation_documents_fails_at_its_start(make_workspace):
    """A split already empty upstream (a small extraction holds none out, a corpus brought
    from elsewhere): tokenize names it, before Levanter reads a cache of nothing."""
    build = """
bpe_tokenizer(name = "tok", data = ":raw", vocab_size = 300)
tokenize(name = "tokens", data = ":raw", tokenizer = ":tok")
"""
    ws = _workspace(make_workspace, build, LONG, [])
    assert _failed(ws, "//p:tokens").startswith("the data //p:raw holds no validation document: train_lm and eval_lm")


def test_a_source_of_empty_texts_fails_saying_they_were_dropped(make_workspace):
    ws = make_workspace(
        {"p/BUILD.marin": 'text_files(name = "text", srcs = ["docs.jsonl"])\n', "p/docs.jsonl": _shard("", "", "")},
        RULES,
    )
    assert _failed(ws, "//p:text") == (
        "only 0 non-empty document(s) (3 empty ones dropped): too few for a train and a validation split"
    )
