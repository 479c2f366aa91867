"""`tokenize`: Levanter token caches that Levanter's own text dataset config reads back.

The caches are checked against tokens computed here with transformers alone, so the test
says what the rule produces, not only that Levanter agrees with itself.
"""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import pytest
from conftest import build_json, keys, store_files
from helpers_workspace import assert_bad_input, build

RULES = 'rules = ["rules.data.decls", "rules.tokenize.decls"]\n'
TEXTS = [f"The value of item {i} is {i * 7}; item {i} follows item {i - 1}." for i in range(24)]
PIPELINE = """\
    text_files(name = "text", srcs = ["docs.jsonl"], sample_count = 20, validation_fraction = 0.25)
    bpe_tokenizer(name = "tok", data = ":text", vocab_size = 320)
    tokenize(name = "tokens", data = ":text", tokenizer = ":tok")
    """


def _workspace(make_workspace) -> Path:
    docs = "".join(json.dumps({"text": text}) + "\n" for text in TEXTS)
    return make_workspace({"d/BUILD.marin": PIPELINE, "d/docs.jsonl": docs}, config=RULES)


@pytest.fixture(scope="module")
def levanter_text():
    import levanter.data.text

    return levanter.data.text


def test_tokenize_writes_deterministic_caches_levanter_reads(make_workspace, tmp_path, levanter_text):
    from transformers import AutoTokenizer

    ws = _workspace(make_workspace)
    first = build_json(ws, "//d:tokens", store=str(tmp_path / "one"))
    output = Path(first["by_label"]["//d:tokens"]["output"])
    tokenizer_output = Path(first["by_label"]["//d:tok"]["output"])
    assert sorted(path.name for path in output.iterdir()) == ["summary.json", "tokenizer", "train", "validation"]
    assert sorted(path.name for path in (output / "tokenizer").iterdir()) == sorted(
        path.name for path in tokenizer_output.iterdir()
    )
    assert not filecmp.dircmp(output / "tokenizer", tokenizer_output).diff_files

    tokenizer = AutoTokenizer.from_pretrained(str(output / "tokenizer"))
    # The tokenizer adds BOS; Levanter appends " " and EOS to every document.
    expected = {
        split: [tokenizer(text + " " + tokenizer.eos_token)["input_ids"] for text in texts]
        for split, texts in {
            "train": [t for i, t in enumerate(TEXTS[:20]) if i % 4],
            "validation": TEXTS[0:20:4],
        }.items()
    }
    assert all(ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id for ids in expected["train"])
    assert json.loads((output / "summary.json").read_text()) == {
        "documents": {"train": 15, "validation": 5},
        "tokens": {split: sum(map(len, rows)) for split, rows in expected.items()},
        "vocab_size": len(tokenizer),
    }
    # What a Levanter training config does with cache_dir = this output.
    config = levanter_text.UrlSingleDatasetLMConfig(cache_dir=str(output), tokenizer=str(output / "tokenizer"))
    for split, rows in expected.items():
        cache = config.build_or_load_cache(split, monitors=False)
        assert [cache[i]["input_ids"].tolist() for i in range(len(cache))] == rows

    second = build_json(ws, "//d:tokens", store=str(tmp_path / "two"))
    assert keys(first) == keys(second)
    outputs = {name: data for name, data in store_files(tmp_path / "one").items() if name.startswith("out/")}
    assert outputs == {name: data for name, data in store_files(tmp_path / "two").items() if name.startswith("out/")}


def test_tokenize_needs_a_corpus_and_a_tokenizer(make_workspace):
    ws = make_workspace({"d/BUILD.marin": '\ntokenize(name = "tokens", data = ":text")\n'}, config=RULES)
    assert_bad_input(
        build(ws, "//d:tokens"), ws, "d/BUILD.marin", 2, "tokenize 'tokens': missing mandatory attribute 'tokenizer'"
    )
    ws = make_workspace(
        {
            "d/BUILD.marin": """\
                genrule(name = "notes", outs = ["notes.txt"], cmd = "echo hi > $@")
                tokenize(name = "tokens", data = ":notes", tokenizer = ":notes")
                """
        },
        config=RULES,
    )
    data = build_json(ws, "//d:tokens", expect_rc=1)
    assert data["by_label"]["//d:tokens"]["reason"] == (
        "the data input is not a corpus: expected summary.json next to train/ (the output of a data rule)"
    )
