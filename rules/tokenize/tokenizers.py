"""The tokenizer steps, `bpe_tokenizer` and `hf_tokenizer`, and the tokenizer directory
they write: a Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json,
special_tokens_map.json, config.json) that `AutoTokenizer.from_pretrained(output)` loads
offline. config.json lets Levanter use the directory as its reference checkpoint: a
trained tokenizer gets a minimal one, a Hub or directory tokenizer keeps its own."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from marinbuild.targets.context import Context, StepFailed
from rules.common.corpus import corpus_root, read_split
from rules.common.hub import resolved_commit, snapshot
from rules.tokenize.constants import CONFIG, DEFAULT_SPECIAL_TOKENS, MODEL_INPUTS, SPECIAL_ROLES, TOKENIZER_FILES


def save_tokenizer(tokenizer: Any, out: Path, config: Mapping[str, Any] | None) -> None:
    """Write `tokenizer` (a PreTrainedTokenizerFast) and config.json into `out`; without a
    model config, a minimal one names the vocabulary and special tokens."""
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


def bpe_tokenizer(ctx: Context) -> None:
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


def hf_tokenizer(ctx: Context) -> None:
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
