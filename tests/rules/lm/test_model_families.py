"""The model families other than Llama through the CLI: a mixture of experts (Mixtral)
trained, evaluated, exported to Hugging Face format and trained on from there, and a tiny
Qwen 2 and OLMo 2 trained and exported.

Kept small for CI (d=32, 64-token sequences, 4 steps; Levanter's setup and compilation
dominate). What transformers loads is checked as for the Llama (tests/rules/lm/test_hf_model.py):
its logits, from PyTorch in a process of its own, against Levanter's on the same tokens,
both in float32 on the CPU, to the same tolerance.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from helpers_hf import LOGITS_ATOL, TOKENS, hf_build, hf_logits, hf_summary
from helpers_lm import lm_workspace

BUILD = """
load("//rules/lm:lm.star", "mixtral", "olmo2", "qwen")
python_corpus(name = "corpus", sample_count = 60, chunk_characters = 1500, validation_fraction = 0.1)
bpe_tokenizer(name = "tokenizer", data = ":corpus", vocab_size = 300)
tokenize(name = "tokens", data = ":corpus", tokenizer = ":tokenizer")
TRAINER = {"steps": 4, "batch_size": 4, "eval_interval": 2, "max_eval_batches": 2}
MOE = mixtral(hidden = 32, layers = 2, heads = 2, experts = 4, experts_per_token = 2, intermediate = 64, seq_len = 64)
train_lm(name = "moe", data = ":tokens", model = MOE, optimizer = {"learning_rate": 3e-3}, trainer = TRAINER)
eval_lm(name = "moe_eval", model = ":moe", data = [":tokens"], max_batches = 2)
export_hf(name = "moe_hf", model = ":moe")
hf_model(name = "moe_base", dir = ":moe_hf", family = "mixtral")
# At a learning rate of 1e-9 its first evaluation (after its first step) is the base's weights'.
train_lm(
    name = "moe_continued",
    data = ":tokens",
    model = MOE,
    optimizer = {"learning_rate": 1e-9},
    trainer = {"steps": 2, "batch_size": 4, "max_eval_batches": 2},
    init_from_hf = ":moe_base",
)
train_lm(name = "qwen", data = ":tokens", model = qwen(hidden = 32, layers = 1, heads = 2, seq_len = 64),
         optimizer = {"learning_rate": 3e-3}, trainer = TRAINER)
export_hf(name = "qwen_hf", model = ":qwen")
train_lm(name = "olmo2", data = ":tokens", model = olmo2(hidden = 32, layers = 1, heads = 2, seq_len = 64),
         optimizer = {"learning_rate": 3e-3}, trainer = TRAINER)
export_hf(name = "olmo2_hf", model = ":olmo2")
# A checkpoint of another family than declared, or than the model that would start from it.
hf_model(name = "not_a_mixtral", dir = ":qwen_hf", family = "mixtral")
train_lm(name = "qwen_from_moe", data = ":tokens", model = qwen(hidden = 32, layers = 1, heads = 2, seq_len = 64),
         trainer = {"steps": 2}, init_from_hf = ":moe_base")
"""
BUILD_TIMEOUT_S = 1200
EXPERTS, LAYERS = 4, 2


def _rows(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]


def test_a_mixture_of_experts_trains_evaluates_exports_and_starts_a_run_and_so_do_qwen_and_olmo2(
    tmp_path: Path,
) -> None:
    ws = lm_workspace(tmp_path / "ws", BUILD)
    data = hf_build(ws, "--keep-going", "//exp:all", expect_rc=1, timeout=BUILD_TIMEOUT_S)
    output = {
        label.rpartition(":")[2]: Path(item["output"])
        for label, item in data.items()
        if label != "stderr" and item["output"]
    }

    # Each family trained: the loss fell from its initialisation.
    for name in ("moe", "qwen", "olmo2"):
        summary = hf_summary(data, f"//exp:{name}")
        assert summary["steps"] == 4 and summary["eval_loss"] < summary["initial_eval_loss"], (name, summary)
    assert json.loads((output["moe"] / "model.json").read_text())["model"]["family"] == "mixtral"

    # The router's statistics at every step, as Levanter's Mixtral computes them: weighted
    # losses, and per layer a routing entropy and each expert's share of the tokens.
    rows = _rows(output["moe"])
    assert [row["step"] for row in rows] == list(range(4))
    for row in rows:
        assert 0 < row["train/load_balancing_loss"] < 1 and 0 < row["train/router_z_loss"] < 1, row
        for layer in range(LAYERS):
            loads = [row[f"train/moe/layer{layer}/expert{expert}_load"] for expert in range(EXPERTS)]
            assert abs(sum(loads) - 1) < 1e-5 and all(0 <= load <= 1 for load in loads), loads
            assert 0 < row[f"train/moe/layer{layer}/routing_entropy"] <= math.log(EXPERTS) + 1e-5
    assert not any(name.startswith("train/moe/") for name in _rows(output["qwen"])[0])  # a dense model has none

    # eval_lm reads the Mixtral back: the final evaluation, on the training's own batches.
    metrics = json.loads((output["moe_eval"] / "metrics.json").read_text())
    assert abs(metrics["loss"] - hf_summary(data, "//exp:moe")["eval_loss"]) < 1e-4, metrics

    # Exported: transformers' own classes of each family, whose logits are Levanter's.
    exported = {
        name: json.loads((output[f"{name}_hf"] / "config.json").read_text()) for name in ("moe", "qwen", "olmo2")
    }
    assert {name: config["model_type"] for name, config in exported.items()} == {
        "moe": "mixtral",
        "qwen": "qwen2",
        "olmo2": "olmo2",
    }
    assert (exported["moe"]["num_local_experts"], exported["moe"]["num_experts_per_tok"]) == (EXPERTS, 2)
    pairs = [(output[name], output[f"{name}_hf"]) for name in ("moe", "qwen", "olmo2")]
    for ours, theirs in hf_logits(pairs):
        assert ours.shape == (len(TOKENS), 300)
        np.testing.assert_allclose(theirs, ours, rtol=0, atol=LOGITS_ATOL)

    # Back in as an hf_model of the family: a run started from it evaluates as the Mixtral's
    # last step did (the weights came through the round trip).
    assert hf_summary(data, "//exp:moe_base")["family"] == "mixtral"
    continued = hf_summary(data, "//exp:moe_continued")
    assert abs(continued["initial_eval_loss"] - hf_summary(data, "//exp:moe")["eval_loss"]) < 1e-4, continued

    # Another family than declared, or than the model's: one line, before anything is loaded.
    assert {label: data[label]["status"] for label in ("//exp:not_a_mixtral", "//exp:qwen_from_moe")} == {
        "//exp:not_a_mixtral": "failed",
        "//exp:qwen_from_moe": "failed",
    }
    assert data["//exp:not_a_mixtral"]["reason"] == (
        "//exp:qwen_hf: config.json says model_type 'qwen2', not the declared family 'mixtral'"
    )
    assert data["//exp:qwen_from_moe"]["reason"] == (
        "init_from_hf: config.json says model_type 'mixtral', not the declared family 'qwen' (model_type 'qwen2')"
    )
    assert "Traceback" not in data["stderr"]
