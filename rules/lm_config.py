"""The schema of `train_lm`'s `model`, `optimizer` and `trainer`: fields, types, defaults.

This is the one place their defaults live. The loader resolves every target's dicts
against it (`marinbuild.targets.attrs.struct`), so a typo or a wrong type fails when the
BUILD file loads — not in a worker after a TPU slice was reserved — and the recipe holds
the effective config: `explain` and `show` print it, and a changed default changes the
key (it is a different experiment). `rules/levanter_lm.py` takes every value from the
resolved dicts and declares no default of its own.

`model` and `optimizer` mirror Levanter's `LlamaConfig` and `AdamConfig`, written out
here rather than read from Levanter because loading BUILD files must never import an ML
library. `tests/test_lm_config.py` holds the two in step: each declared field exists in
Levanter with a compatible type and the same default, and each Levanter field is either
declared or listed in `MODEL_EXCLUDED` / `OPTIMIZER_EXCLUDED` with the reason. A Levanter
upgrade that adds or changes a field fails that test until this file decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marinbuild.targets.attrs import Field, same_as, struct

# -- model: LlamaConfig ------------------------------------------------------------------------

MODEL_FIELDS = (
    Field("seq_len", int, 2048, doc="Tokens per training sequence."),
    Field("hidden_dim", int, 4096),
    Field("intermediate_dim", int, 11008, doc="The MLP's width."),
    Field("num_layers", int, 32),
    Field("num_heads", int, 32),
    Field("num_kv_heads", int, 32, doc="Key/value heads: num_heads for MHA, 1 for MQA; must divide num_heads."),
    Field("head_dim", int, None, optional=True, doc="None: hidden_dim // num_heads."),
    Field(
        "activation_function",
        str,
        "silu",
        choices=("relu", "silu", "swish", "gelu", "gelu_new", "quick_gelu", "tanh"),
    ),
    Field("initializer_range", float, 0.02),
    Field("layer_norm_epsilon", float, 1e-5),
    Field("tie_word_embeddings", bool, False),
    Field("hybrid_norm", bool, False, doc="An extra norm after attention and the MLP."),
    Field("use_qk_norm", bool, False, doc="Norms on queries and keys."),
    Field("input_embedding_norm", bool, False),
    Field("use_bias", bool, False),
    Field("use_layer_norm_weight", bool, True),
    Field("upcast_attn", bool, False, doc="Attention in float32."),
    Field(
        "attn_backend",
        str,
        None,
        optional=True,
        choices=("default", "nvte", "splash", "jax_flash", "vanilla"),
        doc="None: the accelerator's default.",
    ),
    Field("flash_attention_block_size", int, None, optional=True),
    Field(
        "gradient_checkpointing",
        (bool, str),
        True,
        choices=("offload", "recompute", "full", "save_all", "nested"),
        doc="True: recompute block internals; False: save everything; or a named policy.",
    ),
    Field("scan_layers", bool, True),
    Field("cross_entropy_block_size", int, None, optional=True, doc="Tokens per block of the loss (None: one block)."),
)

# LlamaConfig fields a BUILD file cannot set, and why.
MODEL_EXCLUDED = {
    "tokenizer": "set by the rule: the tokenizer the training data was tokenized with",
    "reference_checkpoint": "set by the rule: a local stand-in for the HF export, so nothing reaches the Hub",
    "rope": "a nested config (RotaryEmbeddingsConfig, a draccus choice type), not a JSON scalar",
}

# -- optimizer: AdamConfig --------------------------------------------------------------------

OPTIMIZER_FIELDS = (
    Field("learning_rate", float, 6e-4, doc="The peak learning rate."),
    Field("weight_decay", float, 0.1),
    Field("min_lr_ratio", float, 0.1, doc="The final learning rate, as a fraction of the peak."),
    Field("warmup", (int, float), 0.01, doc="A fraction of the steps (float) or a number of steps (int)."),
    Field("decay", (int, float), None, optional=True, doc="Like warmup; None: decay over all the rest."),
    Field("rewarmup", (int, float), 0.0, doc="Of each cycle, when there are several."),
    Field(
        "cycle_length", (int, float), None, optional=True, doc="A fraction or a number of steps (the list form: no)."
    ),
    Field("cycles", int, None, optional=True, doc="How many cycles (the list form: no)."),
    Field(
        "lr_schedule",
        str,
        "cosine",
        choices=("constant", "cosine", "linear", "inv_sqrt", "inv"),
        doc="The names AdamConfig matches as a string.",
    ),
    Field("weight_decay_modules", str, None, optional=True, doc="A regex of the modules weight decay applies to."),
    Field("default_weight_decay_mask", bool, None, optional=True),
    Field("beta1", float, 0.9),
    Field("beta2", float, 0.95),
    Field("epsilon", float, 1e-8),
    Field("max_grad_norm", float, 1.0, optional=True, doc="Gradient clipping; None: none."),
    Field("nesterov", bool, False),
    Field("update_rms_clipping", float, None, optional=True),
    Field("skip_bad_steps", (bool, int), False, doc="Skip steps whose loss or gradient norm spikes."),
    Field("adamc_weight_decay", bool, False),
)

# AdamConfig fields a BUILD file cannot set, and why.
OPTIMIZER_EXCLUDED = {
    "haps": "a list of steps, not a JSON scalar (and deprecated in Levanter)",
    "cooldown": "deprecated in Levanter ('its semantics are confusing'); use decay",
    "clip_update_norm": "a nested config (ClipUpdateNormConfig), not a JSON scalar",
}

# -- trainer: ours, turned into Levanter's TrainerConfig by rules/levanter_lm.py ----------

TRAINER_FIELDS = (
    Field("steps", int, doc="Training steps, at least 2 (Levanter never checkpoints its step 0)."),
    Field("batch_size", int, 8, doc="Sequences per step."),
    Field("eval_interval", int, same_as("steps"), doc="Evaluate every this many steps."),
    Field("checkpoint_interval", int, same_as("steps"), doc="Checkpoint every this many steps, and at the last."),
    Field(
        "max_eval_batches", int, None, optional=True, doc="Batches per evaluation; None: the whole validation split."
    ),
)

MODEL = struct(MODEL_FIELDS)
OPTIMIZER = struct(OPTIMIZER_FIELDS)
TRAINER = struct(TRAINER_FIELDS)
CONFIGS = {"model": MODEL, "optimizer": OPTIMIZER, "trainer": TRAINER}


def resolve(kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """`fields` checked and completed with the defaults: what a loaded target's attrs hold.

    A no-op on what is already resolved; for the worker's side, where a dict may come from
    elsewhere (an older output's model.json, a benchmark building the config directly).
    """
    return CONFIGS[kind].normalize(dict(fields), "")


def resolve_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A train_lm target's attrs with `model`, `optimizer` and `trainer` resolved."""
    return {**attrs, **{kind: resolve(kind, attrs[kind]) for kind in CONFIGS if kind in attrs}}
