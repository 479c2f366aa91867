"""The post-training rules: `chat_data`, a small chat set made offline, and `sft_lm`,
supervised fine-tuning of a language model on chat data, on Levanter.

sft_lm's model is a checkpoint in Hugging Face format (`hf_model`, `export_hf`) or a
trained model (`train_lm`, another `sft_lm`, exported first, in the step, by export_hf's
code); its data a chat set (rules/posttrain/constants.py). Only the tokens the chat
template marks as the assistant's count in the loss. With `lora`, only low-rank adapters
of the linear layers train (Levanter's `lora_lm`), and the output holds the merged
weights. Either way the output is a training's, as train_lm's: eval_lm and export_hf read
it, `marinbuild compare` shows it beside the model it started from.

Declared here, cheap to import; the steps are chat_data.py and sft_lm.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, AttrType, Field, JsonValue, struct
from marinbuild.targets.context import Context
from marinbuild.targets.rule import Execution, Rule
from rules.common.corpus import CORPUS_ATTRS, SUMMARY, check_corpus_attrs
from rules.common.flops import sft_lm_flops
from rules.common.headline import summary_headline
from rules.common.hub import NO_TORCH
from rules.common.ranges import check_attrs, ranged
from rules.common.stdlib import PYTHON_VERSION, check_python_version, stdlib_inputs
from rules.lm.constants import LEVANTER_MODULES, ML_PACKAGES
from rules.lm.decls import TRAINING_ATTRS, TRAINING_RUN, check_schedule
from rules.posttrain.constants import DEFAULT_CHAT_TEMPLATE, GENERATION_TAG, SHORTENED

# -- chat_data ------------------------------------------------------------------------------


def _chat_data(ctx: Context) -> None:
    from rules.posttrain.chat_data import chat_data as make

    make(ctx)


def _check_chat_data(attrs: Mapping[str, JsonValue]) -> None:
    check_python_version(attrs)
    if attrs["answer_characters"] < 2 * len(SHORTENED):
        raise ValueError(f"answer_characters must be at least {2 * len(SHORTENED)}, got {attrs['answer_characters']}")
    if attrs["follow_ups"] < 0:
        raise ValueError(f"follow_ups must be 0 or more, got {attrs['follow_ups']}")
    check_corpus_attrs(attrs)


chat_data = Rule(
    name="chat_data",
    metrics_file=SUMMARY,
    impl=_chat_data,
    external_inputs=stdlib_inputs,
    execution=Execution.SUBPROCESS,
    code_modules=("rules.posttrain.chat_data",),
    validate=_check_chat_data,
    doc=(
        "A chat set made offline from the running interpreter's standard library: a conversation per "
        "documented public function or class ('What does the function json.dumps do?', answered by its "
        "docstring's first paragraph), a class's going on to follow_ups of its methods. Output: train/ "
        "and validation/ JSONL shards of {'messages': [{'role': ..., 'content': ...}, ...]} lines and "
        "summary.json; sft_lm fine-tunes on it."
    ),
    attrs={
        "answer_characters": Attr(
            types.INT, default=300, doc="The longest answer: a docstring's first paragraph, shortened at a word."
        ),
        "follow_ups": Attr(types.INT, default=2, doc="Questions about a class's methods after the class's own."),
        "system": Attr(types.STRING, default=None, doc="A system message that starts every conversation, if any."),
        "python_version": PYTHON_VERSION,
        **CORPUS_ATTRS,
    },
)


# -- sft_lm ---------------------------------------------------------------------------------

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
        out / SUMMARY,
        "eval loss {eval_loss} on the assistant's tokens (after the first step {initial_eval_loss}), "
        "{steps} steps; model in checkpoint/ (export_hf for Hugging Face), metrics in metrics.jsonl",
    )


def _sft_lm(ctx: Context) -> None:
    started = time.time()
    from rules.common.levanter.training import Places, RunInfo
    from rules.posttrain.sft_lm import FineTuneRequest, fine_tune

    ctx.log.info("fine-tuning; checkpoints in %s", ctx.scratch)
    trained = fine_tune(
        FineTuneRequest(
            attrs=ctx.attrs,
            model=ctx.url(ctx.attrs["model"]),
            data={ctx.attrs["data"]: ctx.url(ctx.attrs["data"])},
            places=Places(ctx.out, ctx.scratch, ctx.tmp),
            run=RunInfo(ctx.label, ctx.key, ctx.progress, ctx.log),
            started=started,
        )
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
            "//rules/lm:lm.star): low-rank adapters train, merged into the weights of the output.",
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
    flops=sft_lm_flops,
    packages=(*ML_PACKAGES, "transformers", "safetensors"),
    env=(NO_TORCH,),
    code_modules=(*LEVANTER_MODULES, "rules.posttrain.sft_lm", "rules.posttrain.constants"),
)
