"""The FLOPs of a training, from its target's attributes, before it runs (`Rule.flops`):
steps × batch × sequence length × training FLOPs per token, counted as Levanter counts
them (its `lm_flops_per_token`, three times for the forward and backward passes) — the
count a run logs as `throughput/total_gflops`, which summary.json's `flops` and the
scaling fits read.

Written out here because planning must never import Levanter (it imports JAX). The
scaling recipes of rules/scaling/scaling.star count alike (`training_flops_per_token`), in
Starlark, which cannot call Python; tests/rules/common/test_flops.py holds the three equal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from marinbuild.targets.attrs import JsonValue
from marinbuild.targets.rule import Target

Lookup = Callable[[str], Target | None]


def training_flops_per_token(model: Mapping[str, Any], vocab_size: int) -> float:
    """Levanter's training FLOPs per token of a resolved model dict: 3 × `lm_flops_per_token`.
    Of a mixture of experts, the MLP counts the experts a token goes through, and the router."""
    hidden, heads, kv_heads, seq = model["hidden_dim"], model["num_heads"], model["num_kv_heads"], model["seq_len"]
    head_dim = hidden / heads  # Levanter's count, whatever head_dim the model sets
    experts = model.get("n_routed_experts", 1)
    active = model.get("num_experts_per_tok", 1) + model.get("n_shared_experts", 0)
    mlp = 2 * 3 * hidden * model["intermediate_dim"] * active
    if experts > 1:
        mlp += 2 * hidden * experts
    qkv = 2 * hidden * (heads * head_dim + 2 * kv_heads * head_dim)
    dense = 2 * hidden * hidden
    attention = (2 * seq * seq * heads * head_dim + 3 * seq * seq * heads + 2 * seq * seq * head_dim * heads) / seq
    lm_head = 2 * hidden * vocab_size
    return 3 * (model["num_layers"] * (mlp + qkv + dense + attention) + lm_head)


def train_lm_flops(attrs: Mapping[str, JsonValue], lookup: Lookup) -> float | None:
    """A train_lm run's FLOPs: the steps it trains (after init_step, continuing a run) of
    batch_size sequences. None when its data's tokenizer does not say its vocabulary's size
    before it runs (a Hub tokenizer)."""
    vocab = _vocab_size(attrs["data"], lookup)
    if vocab is None:
        return None
    trainer, model = attrs["trainer"], attrs["model"]
    steps = trainer["steps"] - (attrs.get("init_step") or 0)
    return steps * trainer["batch_size"] * model["seq_len"] * training_flops_per_token(model, vocab)


def sft_lm_flops(attrs: Mapping[str, JsonValue], lookup: Lookup) -> float | None:
    """A fine-tuning's FLOPs, counted as a training's (LoRA included: Levanter counts its
    backward pass whole), on its sequence length or its model's. None when the model is a
    checkpoint whose shape only its files say (hf_model)."""
    trained = _trained_model(attrs["model"], lookup)
    if trained is None:
        return None
    model, vocab = trained
    model = {**model, "seq_len": attrs["seq_len"] or model["seq_len"]}
    trainer = attrs["trainer"]
    return trainer["steps"] * trainer["batch_size"] * model["seq_len"] * training_flops_per_token(model, vocab)


def _trained_model(label: str, lookup: Lookup) -> tuple[Mapping[str, Any], int] | None:
    """The model dict and vocabulary size of the training `label` names, through the
    targets that read one (export_hf, sft_lm name theirs by label); None past a checkpoint
    made elsewhere."""
    target = lookup(label)
    model = None if target is None else target.attrs.get("model")
    if isinstance(model, str):
        return _trained_model(model, lookup)
    if target is None or not isinstance(model, Mapping) or "data" not in target.attrs:
        return None
    vocab = _vocab_size(target.attrs["data"], lookup)
    return None if vocab is None else (model, vocab)


def _vocab_size(data: JsonValue, lookup: Lookup) -> int | None:
    """The vocabulary of a training's data: its tokenizer's `vocab_size` (bpe_tokenizer's;
    every source of a mixture is tokenized alike)."""
    first = data if isinstance(data, str) else next(iter(data), None) if isinstance(data, (list, dict)) else None
    tokenized = None if first is None else lookup(first)
    tokenizer = tokenized.attrs.get("tokenizer") if tokenized is not None else None
    found = lookup(tokenizer) if isinstance(tokenizer, str) else None
    vocab = found.attrs.get("vocab_size") if found is not None else None
    return vocab if isinstance(vocab, int) else None
