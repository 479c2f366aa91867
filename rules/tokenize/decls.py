"""Tokenizer rules: train a byte-level BPE tokenizer, or bring one from the Hub or a directory.

Every rule here writes a Hugging Face tokenizer directory at the top of its output —
tokenizer.json, tokenizer_config.json, special_tokens_map.json and config.json — that
`transformers.AutoTokenizer.from_pretrained(output)` loads offline. config.json lets
Levanter use the directory as its reference checkpoint: a trained tokenizer gets a
minimal one (model_type, vocab_size and the special token ids), a Hub or directory
tokenizer keeps its own if it has one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.context import Context, StepFailed
from marinbuild.targets.rule import Execution, Resources, Rule
from rules.corpus_shards import corpus_root, read_split
from rules.hub import ALLOW_UNPINNED, HUB_ENV, NO_TORCH, check_pinned, resolved_commit, snapshot

SPECIAL_ROLES = ("bos", "eos", "pad")
DEFAULT_SPECIAL_TOKENS = {"bos": "<|bos|>", "eos": "<|eos|>", "pad": "<|pad|>"}
CONFIG = "config.json"
# A Levanter cache stores every field the tokenizer returns: no token_type_ids.
MODEL_INPUTS = ["input_ids", "attention_mask"]
# What a Hub tokenizer is made of; weights are never downloaded.
TOKENIZER_FILES = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "config.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "*.tiktoken",
]


def save_tokenizer(tokenizer: Any, out: Path, config: Mapping[str, Any] | None) -> None:
    """Write `tokenizer` (a PreTrainedTokenizerFast) and config.json into `out`.

    Without a model config, a minimal one names the vocabulary and special tokens.
    """
    tokenizer.save_pretrained(str(out))
    if config is None:
        config = {
            "model_type": "llama",
            "vocab_size": len(tokenizer),
            **{f"{role}_token_id": getattr(tokenizer, f"{role}_token_id") for role in SPECIAL_ROLES},
        }
    (out / CONFIG).write_text(json.dumps(dict(config), indent=2, sort_keys=True) + "\n")


def tokenizer_directory(files: Iterable[Path]) -> Path:
    """The directory of a tokenizer among an input's files: the one holding tokenizer_config.json."""
    found = sorted({path.parent for path in files if path.name in ("tokenizer_config.json", "tokenizer.json")})
    if len(found) != 1:
        raise StepFailed(
            "expected one tokenizer directory (holding tokenizer.json or tokenizer_config.json) in the input, "
            f"found {len(found)}"
        )
    return found[0]


# -- bpe_tokenizer --------------------------------------------------------------------------


def _bpe_tokenizer(ctx: Context) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    special = {**DEFAULT_SPECIAL_TOKENS, **ctx.attrs["special_tokens"]}
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=ctx.attrs["vocab_size"],
        special_tokens=[special[role] for role in SPECIAL_ROLES],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    root = corpus_root(ctx.files(ctx.attrs["data"]))
    tokenizer.train_from_iterator(read_split(root, "train"), trainer)
    # Like Llama's tokenizers: BOS is added by the tokenizer, EOS by Levanter when it builds caches.
    bos = special["bos"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokenizer.token_to_id(bos))]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        model_input_names=MODEL_INPUTS,
        **{f"{role}_token": special[role] for role in SPECIAL_ROLES},
    )
    save_tokenizer(fast, ctx.out, None)


def _check_bpe_tokenizer(attrs: Mapping[str, JsonValue]) -> None:
    unknown = set(attrs["special_tokens"]) - set(SPECIAL_ROLES)
    if unknown:
        raise ValueError(f"special_tokens takes the roles {list(SPECIAL_ROLES)}, not {sorted(unknown)}")
    if not all(isinstance(token, str) and token for token in attrs["special_tokens"].values()):
        raise ValueError("special tokens must be non-empty strings")
    # 256 byte symbols plus the special tokens come first; BPE merges fill the rest.
    if attrs["vocab_size"] < 256 + len(SPECIAL_ROLES):
        raise ValueError(
            f"vocab_size must be at least {256 + len(SPECIAL_ROLES)} (the 256 bytes and the special tokens)"
        )


bpe_tokenizer = Rule(
    name="bpe_tokenizer",
    impl=_bpe_tokenizer,
    execution=Execution.SUBPROCESS,
    packages=("tokenizers", "transformers"),
    env=(NO_TORCH,),
    resources=Resources(cpu=1, memory_gb=2),
    validate=_check_bpe_tokenizer,
    doc=(
        "Train a byte-level BPE tokenizer on the train split of a data rule's output. Output: a "
        "Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json, "
        "special_tokens_map.json, minimal config.json) with bos/eos/pad tokens."
    ),
    attrs={
        "data": Attr(types.LABEL, doc="A data rule's output (text_files, hf_dataset, python_corpus)."),
        "vocab_size": Attr(types.INT, doc="Total vocabulary: bytes, special tokens and merges."),
        "special_tokens": Attr(
            types.DICT, default={}, doc=f"{{'bos'|'eos'|'pad': token}}; defaults {DEFAULT_SPECIAL_TOKENS}."
        ),
    },
)


# -- hf_tokenizer ---------------------------------------------------------------------------


def _hf_tokenizer(ctx: Context) -> None:
    from transformers import AutoTokenizer

    attrs = ctx.attrs
    if attrs["hub"] is not None:
        directory = snapshot(attrs["hub"], attrs["revision"], "model", allow_patterns=TOKENIZER_FILES)
        ctx.log.info("%s at commit %s", attrs["hub"], resolved_commit(directory))
    else:
        directory = tokenizer_directory(ctx.files(attrs["dir"]))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), use_fast=True, model_input_names=MODEL_INPUTS)
    except (OSError, ValueError) as error:
        raise StepFailed(f"cannot load a tokenizer from {directory}: {error}") from None
    if not tokenizer.is_fast:
        raise StepFailed(f"{directory} has no fast tokenizer (tokenizer.json); Levanter needs one")
    config_file = directory / CONFIG
    save_tokenizer(tokenizer, ctx.out, json.loads(config_file.read_text()) if config_file.is_file() else None)


def _check_hf_tokenizer(attrs: Mapping[str, JsonValue]) -> None:
    if (attrs["hub"] is None) == (attrs["dir"] is None):
        raise ValueError("give exactly one of hub (with revision) and dir")
    if attrs["hub"] is not None and attrs["revision"] is None:
        raise ValueError("a Hub tokenizer needs revision: the 40-hex commit id to use")
    check_pinned(attrs)


hf_tokenizer = Rule(
    name="hf_tokenizer",
    impl=_hf_tokenizer,
    execution=Execution.SUBPROCESS,
    env=(*HUB_ENV, NO_TORCH),
    packages=("transformers", "tokenizers", "huggingface_hub"),
    validate=_check_hf_tokenizer,
    doc=(
        "An existing tokenizer, from the Hub at a pinned commit or from a directory in the "
        "workspace, saved in the same layout as bpe_tokenizer's output."
    ),
    attrs={
        "hub": Attr(types.STRING, default=None, doc="'org/name' of a model repository on the Hub."),
        "revision": Attr(types.STRING, default=None, doc="A 40-hex commit id (a branch needs allow_unpinned)."),
        "dir": Attr(types.OPTIONAL_LABEL, default=None, doc="A filegroup or target holding a tokenizer directory."),
        "allow_unpinned": ALLOW_UNPINNED,
    },
)
