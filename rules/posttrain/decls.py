"""`sft_lm`: supervised fine-tuning of a language model on chat data, on Levanter.

The model is a checkpoint in Hugging Face format (`hf_model`, `export_hf`) or a trained
model (`train_lm`, another `sft_lm`, exported first, in the step, by `export_hf`'s code);
the data a chat set (`rules/chat_data.py`). The chat template renders each conversation
as text and marks the assistant's part with `{% generation %}...{% endgeneration %}`:
only those tokens count in the loss (Levanter's chat format, `mask_user_turns`). With
`lora`, only low-rank adapters of the linear layers train (Levanter's `lora_lm`), and the
output holds the merged weights. Either way the output is a training's
(`rules/levanter_lm.py`'s `run_training`, as train_lm's): eval_lm and export_hf read it,
`marinbuild compare` shows it beside the model it started from.

Declared here, cheap to import; the Levanter side is `rules/levanter_sft.py`, imported
only when a step runs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, AttrType, Field, JsonValue, struct
from marinbuild.targets.context import Context
from marinbuild.targets.rule import Rule
from rules.hub import NO_TORCH
from rules.lm import LEVANTER_MODULES, ML_PACKAGES, TRAINING_ATTRS, TRAINING_RUN, check_schedule, summary_headline
from rules.lm_ranges import check_attrs, ranged

# Each conversation as `role:` lines, the assistant's part (its content and the end of
# sequence token, so that the model learns to stop) between generation tags. A newline
# before each content keeps the tokens of the prompt and of the answer apart.
DEFAULT_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] }}:\n"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] }}{{ eos_token }}{% endgeneration %}"
    "{% else %}{{ message['content'] }}\n{% endif %}{% endfor %}"
)
# How transformers (and Levanter) find the assistant's part of a template.
GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")

# The linear layers of a Llama block, as Levanter names their paths: LoRA's default
# targets. Levanter's own default (every linear layer) takes in the output head too, which
# its loss then cannot read (PEFT's "all-linear" leaves the head out for the same reason).
LLAMA_LINEAR_PATHS = tuple(
    f"transformer.layers.stacked.{block}.{name}"
    for block, names in (
        ("self_attn", ("q_proj", "k_proj", "v_proj", "o_proj")),
        ("mlp", ("gate_proj", "up_proj", "down_proj")),
    )
    for name in names
)
LM_HEAD_PATH = "lm_head"
LORA_FIELDS = (
    Field("r", int, 8, doc="The rank of each low-rank update."),
    Field("alpha", float, 8.0, doc="The update is scaled by alpha / r."),
    Field("dropout", float, 0.0, doc="Dropout on the low-rank path while training."),
    Field(
        "target_modules",
        str,
        r".*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)$",
        doc="A regex of the module paths to adapt, matched from their start (Levanter's LoraConfig).",
    ),
)
_LORA_STRUCT = ranged("lora", struct(LORA_FIELDS))
# None (full fine-tuning), or the LoRA fields checked (kinds and ranges) and completed with their defaults.
LORA = AttrType(
    f"optional {_LORA_STRUCT.name}",
    lambda value, package: None if value is None else _LORA_STRUCT.normalize(value, package),
    _LORA_STRUCT.map_labels,
)


def _check_lora(lora: Mapping[str, JsonValue] | None) -> None:
    """`target_modules` adapts linear layers of the blocks, and not the output head."""
    if lora is None:
        return
    try:
        targets = re.compile(lora["target_modules"])
    except re.error as error:
        raise ValueError(f"lora: target_modules is not a regex: {error}") from None
    if targets.match(LM_HEAD_PATH):
        raise ValueError("lora: target_modules matches lm_head, the output head, which Levanter cannot adapt")
    if not any(targets.match(path) for path in LLAMA_LINEAR_PATHS):
        raise ValueError(
            f"lora: target_modules {lora['target_modules']!r} matches none of the model's linear layers "
            f"({', '.join(path.rpartition('.')[2] for path in LLAMA_LINEAR_PATHS)}, at paths like "
            f"{LLAMA_LINEAR_PATHS[0]})"
        )


def _validate_sft(attrs: Mapping[str, JsonValue]) -> None:
    check_schedule(attrs)
    check_attrs("sft_lm", attrs)
    template = attrs["chat_template"]
    if template is not None and not GENERATION_TAG.search(template):
        raise ValueError(
            "chat_template marks no assistant tokens: put the assistant's part between "
            "{% generation %} and {% endgeneration %}, the only tokens the loss counts"
        )
    _check_lora(attrs["lora"])


def _sft_headline(out: Path) -> str | None:
    return summary_headline(
        out / "summary.json",
        "eval loss {eval_loss} on the assistant's tokens (after the first step {initial_eval_loss}), "
        "{steps} steps; model in checkpoint/ (export_hf for Hugging Face), metrics in metrics.jsonl",
    )


def _sft_lm(ctx: Context) -> None:
    started = time.time()
    from rules import levanter_sft

    ctx.log.info("fine-tuning; checkpoints in %s", ctx.scratch)
    trained = levanter_sft.fine_tune(
        ctx.attrs,
        ctx.url(ctx.attrs["model"]),
        {ctx.attrs["data"]: ctx.url(ctx.attrs["data"])},
        ctx.out,
        ctx.scratch,
        ctx.tmp,
        levanter_sft.RunInfo(ctx.label, ctx.key, ctx.progress, ctx.log),
        started,
    )
    ctx.measure(**trained.measured)
    ctx.log.info("summary: %s; this attempt: %s", trained.summary, trained.measured)


sft_lm = Rule(
    name="sft_lm",
    impl=_sft_lm,
    doc="Fine-tune a language model on chat data with Levanter, the loss on the assistant's tokens only, "
    "optionally with LoRA; outputs checkpoint/, tokenizer/, metrics.jsonl, summary.json, as train_lm does.",
    attrs={
        "model": Attr(
            types.LABEL,
            doc="A Hugging Face checkpoint (hf_model, export_hf) or a trained model (train_lm, sft_lm): its "
            "architecture and tokenizer are the fine-tuned model's.",
        ),
        "data": Attr(types.LABEL, doc="A chat set: chat_data, or any target whose lines hold messages."),
        "chat_template": Attr(
            types.STRING,
            default=DEFAULT_CHAT_TEMPLATE,
            doc="A Jinja chat template marking the assistant's part with {% generation %}; None: the "
            "tokenizer's own. The output's tokenizer carries it.",
        ),
        **TRAINING_ATTRS,
        "lora": Attr(
            LORA,
            default=None,
            doc="None: every weight trains; else {r, alpha, dropout, target_modules} (lora(...) from "
            "//rules:lm.star): low-rank adapters train, merged into the weights of the output.",
        ),
        "seq_len": Attr(
            types.INT,
            default=None,
            doc="Tokens per training sequence (conversations are packed); None: the checkpoint's "
            "max_position_embeddings.",
        ),
    },
    validate=_validate_sft,
    headline=_sft_headline,
    **TRAINING_RUN,
    packages=(*ML_PACKAGES, "transformers", "safetensors"),
    env=(NO_TORCH,),
    code_modules=(*LEVANTER_MODULES, "rules.levanter_sft", "rules.chat_data"),
)
