"""Tokenizer rules: a trained byte-level BPE, and Hub or directory tokenizers in the same layout.

Outputs are loaded back with `transformers.AutoTokenizer`, offline, as Levanter loads them.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import build_json, keys, store_files
from helpers_workspace import assert_bad_input, build
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

pytest_plugins = ["helpers_hub"]  # the offline_hub fixture

RULES = 'rules = ["rules.data.decls", "rules.tokenize.decls"]\n'
LAYOUT = ["config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
CORPUS = "".join(
    json.dumps({"text": f"def function_{i}(value):\n    return value * {i} + {i * i}\n"}) + "\n" for i in range(60)
)


def files_of(output: str | Path) -> list[str]:
    return sorted(path.relative_to(output).as_posix() for path in Path(output).rglob("*") if path.is_file())


def test_bpe_tokenizer_trains_a_loadable_deterministic_tokenizer(make_workspace, tmp_path):
    ws = make_workspace(
        {
            "t/BUILD.marin": """\
                text_files(name = "code", srcs = ["code.jsonl"])
                bpe_tokenizer(name = "tok", data = ":code", vocab_size = 300, special_tokens = {"eos": "<|endoftext|>"})
                """,
            "t/code.jsonl": CORPUS,
        },
        config=RULES,
    )
    first = build_json(ws, "//t:tok", store=str(tmp_path / "one"))
    output = first["by_label"]["//t:tok"]["output"]
    assert files_of(output) == LAYOUT
    tokenizer = AutoTokenizer.from_pretrained(output)
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    assert len(tokenizer) == 300
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == ("<|bos|>", "<|endoftext|>", "<|pad|>")
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (0, 1, 2)
    text = "def function_7(value):\n    return value * 7 + 49\n"
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == 0 and 1 not in ids  # the tokenizer adds BOS; Levanter appends EOS
    assert len(ids) < len(text.encode()) / 2  # merges learned from the corpus
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert list(tokenizer(text)) == ["input_ids", "attention_mask"]
    config = json.loads((Path(output) / "config.json").read_text())
    assert config == {"model_type": "llama", "vocab_size": 300, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}
    second = build_json(ws, "//t:tok", store=str(tmp_path / "two"))
    assert keys(first) == keys(second)
    outputs = {name: data for name, data in store_files(tmp_path / "one").items() if name.startswith("out/")}
    assert outputs == {name: data for name, data in store_files(tmp_path / "two").items() if name.startswith("out/")}


def test_bpe_tokenizer_attribute_mistakes_fail_at_load(make_workspace):
    cases = [
        (
            'bpe_tokenizer(name = "tok", data = ":c", vocab_size = 100)\n',
            "bpe_tokenizer 'tok': vocab_size must be at least 259",
        ),
        (
            'bpe_tokenizer(name = "tok", data = ":c", vocab_size = 500, special_tokens = {"unk": "?"})\n',
            "bpe_tokenizer 'tok': special_tokens takes the roles ['bos', 'eos', 'pad'], not ['unk']",
        ),
    ]
    for text, message in cases:
        ws = make_workspace({"t/BUILD.marin": "\n" + text}, config=RULES)
        assert_bad_input(build(ws, "//t:tok"), ws, "t/BUILD.marin", 2, message)


def _word_level_tokenizer() -> PreTrainedTokenizerFast:
    """A small tokenizer unlike a trained BPE, standing in for a Hub model's."""
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, "hello": 3, "world": 4}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", bos_token="<s>", eos_token="</s>")


def _tokenizer_files(tmp_path: Path) -> dict[str, bytes]:
    directory = tmp_path / "saved"
    _word_level_tokenizer().save_pretrained(str(directory))
    return {path.name: path.read_bytes() for path in directory.iterdir()}


def test_hf_tokenizer_from_a_pinned_hub_snapshot(make_workspace, offline_hub, tmp_path):
    model_config = {"model_type": "gpt2", "vocab_size": 5, "n_layer": 2}
    offline_hub.add("model", "acme/words", {**_tokenizer_files(tmp_path), "config.json": json.dumps(model_config)})
    ws = make_workspace(
        {"t/BUILD.marin": f'hf_tokenizer(name = "tok", hub = "acme/words", revision = "{offline_hub.commit}")\n'},
        config=RULES,
    )
    output = build_json(ws, "//t:tok")["by_label"]["//t:tok"]["output"]
    assert files_of(output) == LAYOUT
    assert json.loads((Path(output) / "config.json").read_text()) == model_config
    tokenizer = AutoTokenizer.from_pretrained(output)
    assert tokenizer("hello there world")["input_ids"] == [3, 0, 4]
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<s>", "</s>")


def test_hf_tokenizer_from_a_workspace_directory(make_workspace, tmp_path):
    files = {f"t/words/{name}": data for name, data in _tokenizer_files(tmp_path).items()}
    ws = make_workspace(
        {
            **files,
            "t/BUILD.marin": """\
                filegroup(name = "words", srcs = glob(["words/*"]))
                hf_tokenizer(name = "tok", dir = ":words")
                """,
        },
        config=RULES,
    )
    output = build_json(ws, "//t:tok")["by_label"]["//t:tok"]["output"]
    assert files_of(output) == LAYOUT
    assert json.loads((Path(output) / "config.json").read_text()) == {
        "model_type": "llama",
        "vocab_size": 5,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": None,
    }
    assert AutoTokenizer.from_pretrained(output)("world hello")["input_ids"] == [4, 3]


def test_hf_tokenizer_refuses_a_branch_and_ambiguity(make_workspace, offline_hub):
    cases = [
        (
            'hf_tokenizer(name = "tok", hub = "acme/words", revision = "v1.0")\n',
            "hf_tokenizer 'tok': revision 'v1.0' is not a commit hash",
        ),
        ('hf_tokenizer(name = "tok", hub = "acme/words")\n', "hf_tokenizer 'tok': a Hub tokenizer needs revision"),
        (
            f'hf_tokenizer(name = "tok", hub = "acme/words", revision = "{offline_hub.commit}", dir = ":d")\n',
            "hf_tokenizer 'tok': give exactly one of hub (with revision) and dir",
        ),
    ]
    for text, message in cases:
        ws = make_workspace({"t/BUILD.marin": "\n" + text}, config=RULES)
        assert_bad_input(build(ws, "//t:tok"), ws, "t/BUILD.marin", 2, message)
