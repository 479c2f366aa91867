"""export_hf and hf_model through the CLI: Hugging Face checkpoints out and in.

The model is test_train_lm.py's tiny Llama (1 layer, d=32, 64-token sequences). What
transformers loads is checked by loading it, offline, with PyTorch's
`AutoModelForCausalLM` in a process of its own (the steps never import torch), and
comparing its logits with Levanter's on the same tokens, both in float32 on the CPU.
Hub checkpoints come from a Hub-layout cache on disk (`helpers_hub`), never the network.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
from conftest import build_json, run_cli
from helpers_checkpoints import hub_checkpoint, llama_config, llama_weights, safetensors_file
from helpers_hf import DATA, EXPORTED_MODEL, LOGITS_ATOL, TOKENS, hf_build, hf_logits, hf_summary
from helpers_lm import CONFIG, lm_workspace
from helpers_workspace import assert_bad_declarations

pytest_plugins = ["helpers_hub"]  # the offline_hub fixture

EXPORTED = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}

MODEL = (
    EXPORTED_MODEL
    + """
export_hf(name = "export_3", model = ":model", step = 3)
"""
)
# Continued pretraining from the export: at a learning rate of 1e-9 its first evaluation
# (after its first step) is the evaluation of the weights it started from.
CONTINUED = """
hf_model(name = "base", dir = ":export")
train_lm(
    name = "continued",
    data = ":tokens",
    model = llama(hidden = 32, layers = 1, heads = 2, seq_len = 64),
    optimizer = {"learning_rate": 1e-9},
    trainer = {"steps": 2, "batch_size": 4, "max_eval_batches": 2},
    init_from_hf = ":base",
)
"""
# What does not fit the base: another architecture, data tokenized with another tokenizer.
MISFITS = """
train_lm(
    name = "wider",
    data = ":tokens",
    model = llama(hidden = 64, layers = 1, heads = 2, seq_len = 64),
    trainer = {"steps": 2},
    init_from_hf = ":base",
)
bpe_tokenizer(name = "other_tokenizer", data = ":corpus", vocab_size = 290)
tokenize(name = "other_tokens", data = ":corpus", tokenizer = ":other_tokenizer")
train_lm(
    name = "retokenized",
    data = ":other_tokens",
    model = llama(hidden = 32, layers = 1, heads = 2, seq_len = 64),
    trainer = {"steps": 2},
    init_from_hf = ":base",
)
"""


def test_export_hf_loads_in_transformers_and_starts_a_run(tmp_path: Path, offline_hub) -> None:
    ws = lm_workspace(tmp_path / "ws", DATA + MODEL + CONTINUED + MISFITS)
    data = hf_build(ws, "--keep-going", "//exp:all", expect_rc=1)

    # Exported: the final weights and those kept at step 3, as transformers' files.
    exported, exported_3 = Path(data["//exp:export"]["output"]), Path(data["//exp:export_3"]["output"])
    assert {path.name for path in exported.iterdir()} == EXPORTED
    config = json.loads((exported / "config.json").read_text())
    assert (config["model_type"], config["hidden_size"], config["vocab_size"]) == ("llama", 32, 300)
    rc, kept, err = run_cli(ws, "where", "--step", "3", "//exp:model")
    assert rc == 0, err
    model = Path(data["//exp:model"]["output"])
    (final, final_hf), (at_3, at_3_hf) = hf_logits([(model, exported), (Path(kept.strip()), exported_3)])
    assert final.shape == (len(TOKENS), 300)
    np.testing.assert_allclose(final_hf, final, rtol=0, atol=LOGITS_ATOL)
    np.testing.assert_allclose(at_3_hf, at_3, rtol=0, atol=LOGITS_ATOL)
    assert np.abs(at_3_hf - final).max() > 100 * LOGITS_ATOL  # another step's weights are told apart

    # Started from the export (as an hf_model), a run evaluates as the base's last step did;
    # the base itself, started afresh, evaluated far higher.
    trained, continued = hf_summary(data, "//exp:model"), hf_summary(data, "//exp:continued")
    assert abs(continued["initial_eval_loss"] - trained["eval_loss"]) < 1e-4, (continued, trained)
    assert trained["initial_eval_loss"] - trained["eval_loss"] > 0.1
    assert hf_summary(data, "//exp:base") == {
        "family": "llama",
        "source": {"dir": "//exp:export"},
        "files": sorted(EXPORTED),
        "vocab_size": 300,
    }

    # What does not fit fails in one line, before Levanter loads anything.
    assert data["//exp:wider"]["status"] == data["//exp:retokenized"]["status"] == "failed"
    assert data["//exp:wider"]["reason"] == (
        "init_from_hf's config.json does not match this target's model: hidden_size 32 there, 64 here "
        "(model: hidden_dim); intermediate_size 128 there, 256 here (model: intermediate_dim); "
        "head_dim 16 there, 32 here (model: head_dim)"
    )
    assert data["//exp:retokenized"]["reason"].startswith(
        "init_from_hf's tokenizer is not the one the data was tokenized with"
    )
    assert "Traceback" not in data["stderr"]

    # The same checkpoint from the Hub, pinned to a commit: the same files.
    offline_hub.add("model", "acme/tiny-llama", {path.name: path.read_bytes() for path in exported.iterdir()})
    hub = f'hf_model(name = "hub_base", hub = "acme/tiny-llama", revision = "{offline_hub.commit}")\n'
    (ws / "exp" / "BUILD.marin").write_text(DATA + MODEL + CONTINUED + hub)
    again = hf_build(ws, "//exp:all")
    assert {label: item["status"] for label, item in again.items() if label != "stderr"} == {
        **{label: "cached" for label in ("//exp:corpus", "//exp:tokenizer", "//exp:tokens", "//exp:model")},
        **{label: "cached" for label in ("//exp:export", "//exp:export_3", "//exp:base", "//exp:continued")},
        "//exp:hub_base": "built",
    }
    from_hub = Path(again["//exp:hub_base"]["output"])
    assert hf_summary(again, "//exp:hub_base")["source"] == {"repo": "acme/tiny-llama", "commit": offline_hub.commit}
    assert all((from_hub / name).read_bytes() == (exported / name).read_bytes() for name in EXPORTED)


def test_bad_hugging_face_checkpoints_fail_in_one_line(make_workspace, offline_hub) -> None:
    weights = b"not read: only its presence is checked before the family"
    llama = json.dumps({"model_type": "llama"})
    ws = make_workspace(
        {
            "m/BUILD.marin": """\
                filegroup(name = "no_weights", srcs = glob(["no_weights/*"]))
                filegroup(name = "torch_weights", srcs = glob(["torch_weights/*"]))
                filegroup(name = "missing_shard", srcs = glob(["missing_shard/*"]))
                filegroup(name = "gpt2", srcs = glob(["gpt2/*"]))
                filegroup(name = "no_tokenizer", srcs = glob(["no_tokenizer/*"]))
                hf_model(name = "no_weights_model", dir = ":no_weights")
                hf_model(name = "torch_weights_model", dir = ":torch_weights")
                hf_model(name = "missing_shard_model", dir = ":missing_shard")
                hf_model(name = "gpt2_model", dir = ":gpt2")
                hf_model(name = "no_tokenizer_model", dir = ":no_tokenizer")
                """,
            "m/no_weights/config.json": llama,
            "m/no_weights/tokenizer.json": "{}",
            "m/torch_weights/config.json": llama,
            "m/torch_weights/pytorch_model.bin": weights,
            "m/missing_shard/config.json": llama,
            "m/missing_shard/model.safetensors.index.json": json.dumps(
                {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
            ),
            "m/missing_shard/model-00001-of-00002.safetensors": weights,
            "m/gpt2/config.json": json.dumps({"model_type": "gpt2"}),
            "m/gpt2/model.safetensors": weights,
            "m/no_tokenizer/config.json": llama,
            "m/no_tokenizer/model.safetensors": weights,
        },
        config=CONFIG,
    )
    data = build_json(ws, "--keep-going", "//m:all", expect_rc=1)["by_label"]
    reasons = {label.rpartition(":")[2]: item["reason"] for label, item in data.items() if item["status"] == "failed"}
    assert reasons == {
        "no_weights_model": "//m:no_weights holds no weights: no model.safetensors and no model.safetensors.index.json",
        "torch_weights_model": "//m:torch_weights holds no weights: no model.safetensors and no "
        "model.safetensors.index.json (pytorch_model.bin is not read: save it as safetensors)",
        "missing_shard_model": "//m:missing_shard holds no weights: model.safetensors.index.json names shards "
        "that are not there: model-00002-of-00002.safetensors",
        "gpt2_model": "//m:gpt2: config.json says model_type 'gpt2', not the declared family 'llama'",
        "no_tokenizer_model": "//m:no_tokenizer has no tokenizer.json: Levanter needs a fast tokenizer",
    }
    assert not any(path.name == "summary.json" for path in (ws / "cache").rglob("*"))  # nothing published


def test_hf_model_attributes_are_checked_at_load(make_workspace) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    cases = [
        ('hf_model(name = "m", hub = "acme/tiny", revision = "main")', "revision 'main' is not a commit hash"),
        (f'hf_model(name = "m", hub = "acme/tiny", revision = "{commit}", dir = ":d")', "give exactly one of hub"),
        ('hf_model(name = "m", hub = "acme/tiny")', "a Hub checkpoint needs revision"),
        (f'hf_model(name = "m", dir = ":d", revision = "{commit}")', "revision goes with hub"),
        (f'hf_model(name = "m", hub = "acme/tiny", revision = "{commit}", family = "gpt2")', "family must be one of"),
        ('export_hf(name = "m", model = ":d", step = 0)', "step: Levanter keeps no checkpoint at step 0"),
        (
            'train_lm(name = "m", data = ":d", model = {}, trainer = {"steps": 4}, init_from = ":d", init_step = 1, '
            'init_from_hf = ":d")',
            "give one of init_from",
        ),
    ]
    assert_bad_declarations(make_workspace, cases, config=CONFIG)


def _header(data: bytes) -> tuple[dict, bytes]:
    """A safetensors file's header, and the bytes after it."""
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + length]), data[8 + length :]


def _with_header(header: dict, rest: bytes) -> bytes:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + rest


def test_hub_checkpoints_are_checked_to_their_headers_before_anything_is_published(make_workspace, offline_hub) -> None:
    """Checkpoints in the shapes save_pretrained writes pass; one cut short, with a hostile or
    inconsistent header, an index that disagrees with its shards, or weights of other shapes
    than config.json says fails in one line naming the file, and nothing is published."""
    config = llama_config()
    weights = llama_weights(config)
    whole, sharded = hub_checkpoint(config, weights), hub_checkpoint(config, weights, shards=3)
    tied_config = llama_config(tie_word_embeddings=True)
    data = whole["model.safetensors"]
    header, tensors = _header(data)
    body = len(tensors)
    first, second = sorted(
        (name for name in header if name != "__metadata__"), key=lambda n: header[n]["data_offsets"]
    )[:2]
    overlapping = json.loads(json.dumps(header))
    overlapping[second]["data_offsets"] = [o - 4 for o in header[second]["data_offsets"]]
    index = json.loads(sharded["model.safetensors.index.json"])
    misplaced = {**index, "weight_map": {**index["weight_map"], "lm_head.weight": "model-00003-of-00003.safetensors"}}
    outside = {**index, "weight_map": {**index["weight_map"], "lm_head.weight": "../model.safetensors"}}
    cases: dict[str, dict[str, str | bytes]] = {
        "whole": whole,
        "sharded": sharded,
        "tied": hub_checkpoint(tied_config, llama_weights(tied_config)),
        "cut_short": whole | {"model.safetensors": data[:-100]},
        "cut_in_header": whole | {"model.safetensors": data[:40]},
        "huge_header": whole | {"model.safetensors": struct.pack("<Q", 2**63) + data[8:]},
        "not_json": whole | {"model.safetensors": data[:8] + b"\x00not json" + data[17:]},
        "overlapping": whole | {"model.safetensors": _with_header(overlapping, tensors)},
        "missing_shard": {k: v for k, v in sharded.items() if k != "model-00002-of-00003.safetensors"},
        "misplaced": sharded | {"model.safetensors.index.json": json.dumps(misplaced)},
        "outside": sharded | {"model.safetensors.index.json": json.dumps(outside)},
        "wide_vocabulary": whole | {"config.json": json.dumps(llama_config(vocab_size=65))},
        "deeper": whole | {"config.json": json.dumps(llama_config(num_hidden_layers=3))},
        "other_heads": whole
        | {"model.safetensors": safetensors_file(llama_weights(llama_config(num_key_value_heads=4)))},
    }
    files = {f"m/{case}/{name}": content for case, checkpoint in cases.items() for name, content in checkpoint.items()}
    build = "".join(
        f'filegroup(name = "{case}", srcs = glob(["{case}/*"]))\nhf_model(name = "{case}_model", dir = ":{case}")\n'
        for case in cases
    )
    offline_hub.add("model", "acme/sharded-llama", sharded)
    build += f'hf_model(name = "hub_model", hub = "acme/sharded-llama", revision = "{offline_hub.commit}")\n'
    ws = make_workspace({"m/BUILD.marin": build, **files}, config=CONFIG)
    built = build_json(ws, "--keep-going", "//m:all", expect_rc=1)
    assert "Traceback" not in built["stderr"]
    outcomes = {
        label.rpartition(":")[2]: item["reason"] if item["status"] == "failed" else item["status"]
        for label, item in built["by_label"].items()
        if label.endswith("_model")
    }
    assert outcomes == {
        "whole_model": "built",
        "sharded_model": "built",
        "tied_model": "built",
        "hub_model": "built",
        "cut_short_model": f"//m:cut_short: model.safetensors is cut short: its header declares {body:,} bytes of "
        f"tensors, and {body - 100:,} follow it",
        "cut_in_header_model": f"//m:cut_in_header: model.safetensors is cut short: it declares a header of "
        f"{len(data) - body - 8:,} bytes, and the whole file is 40",
        "huge_header_model": "//m:huge_header: model.safetensors declares a header of 9,223,372,036,854,775,808 "
        "bytes, more than the 100,000,000 safetensors reads",
        "not_json_model": "//m:not_json: model.safetensors has a header that is not JSON (Expecting value: line 1 "
        "column 1 (char 0))",
        "overlapping_model": f"//m:overlapping: model.safetensors declares {first} and {second} at overlapping "
        f"offsets (bytes {header[second]['data_offsets'][0] - 4:,} to {header[first]['data_offsets'][1]:,})",
        "missing_shard_model": "//m:missing_shard holds no weights: model.safetensors.index.json names shards that "
        "are not there: model-00002-of-00003.safetensors",
        "misplaced_model": "//m:misplaced: model.safetensors.index.json puts lm_head.weight in "
        "model-00003-of-00003.safetensors, which does not hold it",
        "outside_model": "//m:outside: model.safetensors.index.json names shards that are not .safetensors files "
        "beside it: ['../model.safetensors']",
        "wide_vocabulary_model": "//m:wide_vocabulary: model.safetensors: model.embed_tokens.weight has shape "
        "[64, 16], but config.json makes it [vocab_size, hidden_size] = [65, 16]",
        "deeper_model": "//m:deeper: model.safetensors holds 2 layers (0 to 1), but config.json says "
        "num_hidden_layers 3",
        "other_heads_model": "//m:other_heads: model.safetensors: model.layers.0.self_attn.k_proj.weight has "
        "shape [16, 16], but config.json makes it [num_key_value_heads*head_dim, hidden_size] = [8, 16]",
    }
    published = [json.loads(path.read_text()) for path in (ws / "cache").rglob("summary.json")]
    assert sorted(summary["source"].get("dir", "hub") for summary in published) == [
        "//m:sharded",
        "//m:tied",
        "//m:whole",
        "hub",
    ]
