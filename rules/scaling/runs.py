"""The runs a scaling law is fitted on, read from `train_lm` outputs: each one's budget,
tokens, FLOPs and final eval loss (summary.json) and its model's shape (model.json)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marinbuild.targets.context import StepFailed
from rules.common.corpus import SUMMARY
from rules.common.training_files import MODEL_FILE


@dataclass(frozen=True)
class Run:
    """One training run: its nominal budget, and what Levanter measured."""

    label: str
    budget: float
    tokens: float
    flops: float
    loss: float
    params: float | None = None  # Levanter's count, embeddings included
    non_embedding_params: float | None = None  # attention and MLP weights (model.json)


def read_run(label: str, root: Path, budget: float) -> Run:
    """A run from a `train_lm` output: tokens, FLOPs and final eval loss from summary.json,
    the model's shape from model.json."""
    try:
        summary = json.loads((root / SUMMARY).read_text())
    except (OSError, ValueError) as error:
        raise StepFailed(f"{label} has no readable summary.json ({error}); runs must be train_lm targets") from error
    missing = [name for name in ("tokens", "flops", "eval_loss") if summary.get(name) is None]
    if missing:
        raise StepFailed(
            f"{label}: summary.json lacks {', '.join(missing)}; train it with an evaluation at its last step"
        )
    try:
        model = json.loads((root / MODEL_FILE).read_text())["model"]
    except (OSError, ValueError, KeyError):
        model = None
    return Run(
        label,
        float(budget),
        float(summary["tokens"]),
        float(summary["flops"]),
        float(summary["eval_loss"]),
        summary.get("parameter_count"),
        None if model is None else non_embedding_params(model),
    )


def non_embedding_params(model: dict[str, Any]) -> int:
    """The attention and MLP weights of a model config that a token goes through: of a
    mixture of experts, its active experts' and the router's, as `non_embedding_params`
    of scaling.star counts them (tests/rules/scaling/test_scaling_recipe.py holds the two equal)."""
    hidden, heads, kv_heads = model["hidden_dim"], model["num_heads"], model["num_kv_heads"]
    head_dim = model.get("head_dim") or hidden // heads
    attention = hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden
    experts = model.get("n_routed_experts", 1)
    active = model.get("num_experts_per_tok", 1) + model.get("n_shared_experts", 0)
    router = hidden * experts if experts > 1 else 0
    return model["num_layers"] * (attention + 3 * hidden * model["intermediate_dim"] * active + router)
