"""The schema of `train_lm`'s `model`, `optimizer` and `trainer`: fields, types, defaults.

This is the one place their defaults live. The loader resolves every target's dicts
against it (`marinbuild.targets.attrs.struct`, each number against its range in
`rules/common/ranges.py`), so a typo, a wrong type or a value out of range fails when the
BUILD file loads — not in a worker after a TPU slice was reserved — and the recipe holds
the effective config: `explain` and `show` print it, and a changed default changes the
key (it is a different experiment). `rules/common/levanter/` takes every value from the
resolved dicts and declares no default of its own.

`model` is one of the model families in `FAMILIES`, named by its `family` field (a
Llama when it has none; a Llama's dict never holds the field, so Llama recipes kept their
keys when the other families came): each mirrors its Levanter config class (`LlamaConfig`,
`MixtralConfig`, `QwenConfig`, `Olmo2Config`), as `optimizer` mirrors `AdamConfig`. They
are written out here rather than read from Levanter because loading BUILD files must never
import an ML library. `tests/rules/lm/test_lm_config.py` holds the two in step: each declared field
exists in Levanter with a compatible type and the same default, and each Levanter field is
either declared or listed among the family's `excluded` / `OPTIMIZER_EXCLUDED` with the
reason. A Levanter upgrade that adds or changes a field fails that test until this file
decides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from marinbuild.targets.attrs import Field, same_as, struct, tagged_struct
from rules.common.ranges import ranged

# -- model: one family's config ----------------------------------------------------------------

FAMILY = "family"

# LlamaConfig's fields; the other families share most of them.
LLAMA_FIELDS = (
    Field("seq_len", int, 2048, doc="Tokens per training sequence."),
    Field("hidden_dim", int, 4096),
    Field("intermediate_dim", int, 11008, doc="The MLP's width (of each expert, in a mixture of experts)."),
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

# Fields of every family's config class that a BUILD file cannot set, and why.
_SET_BY_THE_RULE = {
    "tokenizer": "set by the rule: the tokenizer the training data was tokenized with",
    "reference_checkpoint": "set by the rule: a local stand-in for the HF export, so nothing reaches the Hub",
    "rope": "a nested config (RotaryEmbeddingsConfig, a draccus choice type), not a JSON scalar",
}
_NO_FLASH_SWITCH = {
    "use_flash_attention": "set by the rule to None: attn_backend alone chooses the attention (this older "
    "switch, True by default, would contradict attn_backend = 'vanilla')",
}
_IGNORED = "Levanter's {family} does not read it (its layers have no such option)"


@dataclasses.dataclass(frozen=True)
class Family:
    """A model family: the fields of its Levanter config class a BUILD file sets, the
    fields it cannot (with the reason), and the `model_type` of its Hugging Face
    config.json (what `export_hf` writes and `hf_model(family = ...)` expects)."""

    name: str
    title: str  # as people write it: "Mixtral", "OLMo 2"
    fields: tuple[Field, ...]
    excluded: Mapping[str, str]
    hf_model_type: str


def _fields(names_out: tuple[str, ...] = (), **defaults: Any) -> tuple[Field, ...]:
    """Llama's fields without `names_out`, some with other defaults (those of the family's class)."""
    unknown = set(defaults) - {field.name for field in LLAMA_FIELDS}
    if unknown:
        raise ValueError(f"defaults for fields Llama does not have: {sorted(unknown)}")
    return tuple(
        dataclasses.replace(field, default=defaults.get(field.name, field.default))
        for field in LLAMA_FIELDS
        if field.name not in names_out
    )


_MOE_FIELDS = (
    Field("n_routed_experts", int, 8, doc="Experts per MoE layer."),
    Field("num_experts_per_tok", int, 2, doc="Experts each token is routed to (at most n_routed_experts)."),
    Field(
        "n_shared_experts", int, 0, doc="Experts every token goes through besides (no Hugging Face Mixtral has any)."
    ),
    Field("lbl_coef", float, 0.01, optional=True, doc="Weight of the load-balancing loss; None: none."),
    Field("rzl_coef", float, 0.001, optional=True, doc="Weight of the router z-loss; None: none."),
)

# LlamaConfig fields that Levanter's Mixtral and Qwen inherit but whose layers never read,
# and those that Olmo2Config lacks.
_UNREAD = ("head_dim", "hybrid_norm", "use_qk_norm")
_NOT_IN_OLMO2 = (*_UNREAD, "input_embedding_norm")

FAMILIES = {
    family.name: family
    for family in (
        Family("llama", "Llama", LLAMA_FIELDS, _SET_BY_THE_RULE, "llama"),
        Family(
            "mixtral",
            "Mixtral",
            (
                *_fields(
                    _UNREAD,
                    seq_len=8192,
                    intermediate_dim=14336,
                    num_kv_heads=8,
                    layer_norm_epsilon=1e-6,
                    flash_attention_block_size=2048,
                ),
                *_MOE_FIELDS,
            ),
            {
                **_SET_BY_THE_RULE,
                **_NO_FLASH_SWITCH,
                **{name: _IGNORED.format(family="Mixtral") for name in _UNREAD},
                "sliding_window": "Levanter's Mixtral attends over the whole sequence, and its Hugging Face export "
                "writes no window",
            },
            "mixtral",
        ),
        Family(
            "qwen",
            "Qwen 2",
            _fields(_UNREAD),
            {
                **_SET_BY_THE_RULE,
                **{name: _IGNORED.format(family="Qwen") for name in _UNREAD},
                **{
                    name: "Levanter's Qwen has no sliding-window attention (it fails on sequences longer than one)"
                    for name in ("use_sliding_window", "sliding_window", "max_window_layers")
                },
            },
            "qwen2",
        ),
        Family(
            "olmo2",
            "OLMo 2",
            (
                *(
                    dataclasses.replace(field, kind=bool, choices=(), doc="True: recompute block internals.")
                    if field.name == "gradient_checkpointing"  # a bool in Olmo2Config, no named policy
                    else field
                    for field in _fields(_NOT_IN_OLMO2, seq_len=4096, layer_norm_epsilon=1e-6)
                ),
                Field("attention_bias", bool, False, doc="Biases on the attention projections."),
                Field("attention_dropout", float, 0.0),
            ),
            {**_SET_BY_THE_RULE, **_NO_FLASH_SWITCH},
            "olmo2",
        ),
    )
}
DEFAULT_FAMILY = "llama"


def family(fields: Mapping[str, Any]) -> Family:
    """The family of a model dict (resolved or not)."""
    return FAMILIES[fields.get(FAMILY, DEFAULT_FAMILY)]


def check_model(model: Mapping[str, Any]) -> None:
    """Checks across a resolved model's fields (their names, types and ranges were checked
    by the schema): a ValueError says what Levanter would fail on once the step runs."""
    if model["num_heads"] % model["num_kv_heads"]:
        raise ValueError(
            f"model: num_heads ({model['num_heads']}) must be a multiple of num_kv_heads ({model['num_kv_heads']})"
        )
    if "n_routed_experts" in model and model["num_experts_per_tok"] > model["n_routed_experts"]:
        raise ValueError(
            f"model: num_experts_per_tok ({model['num_experts_per_tok']}) must be at most n_routed_experts "
            f"({model['n_routed_experts']})"
        )


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

# -- trainer: ours, turned into Levanter's TrainerConfig by rules/common/levanter/ ----------

TRAINER_FIELDS = (
    Field("steps", int, doc="Training steps, at least 2 (Levanter never checkpoints its step 0)."),
    Field("batch_size", int, 8, doc="Sequences per step."),
    Field("eval_interval", int, same_as("steps"), doc="Evaluate every this many steps."),
    Field("checkpoint_interval", int, same_as("steps"), doc="Checkpoint every this many steps, and at the last."),
    Field(
        "max_eval_batches", int, None, optional=True, doc="Batches per evaluation; None: the whole validation split."
    ),
)

CONFIGS = {
    "model": tagged_struct(FAMILY, {name: found.fields for name, found in FAMILIES.items()}, DEFAULT_FAMILY),
    "optimizer": struct(OPTIMIZER_FIELDS),
    "trainer": struct(TRAINER_FIELDS),
}
# The attributes' types: each also checks its numbers' ranges (rules/common/ranges.py).
MODEL, OPTIMIZER, TRAINER = (ranged(kind, CONFIGS[kind]) for kind in ("model", "optimizer", "trainer"))


def resolve(kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """`fields` checked and completed with the defaults: what a loaded target's attrs hold.

    A no-op on what is already resolved; for the worker's side, where a dict may come from
    elsewhere (an older output's model.json, a benchmark building the config directly).
    The ranges are the BUILD file's to respect, checked at load: here a dict may hold what
    no BUILD file can ask for (eval_lm's one-step trainer).
    """
    return CONFIGS[kind].normalize(dict(fields), "")


def resolve_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A train_lm target's attrs with `model`, `optimizer` and `trainer` resolved."""
    return {**attrs, **{kind: resolve(kind, attrs[kind]) for kind in CONFIGS if kind in attrs}}
