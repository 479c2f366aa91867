"""The tokenizer rules: train a byte-level BPE tokenizer (`bpe_tokenizer`) or bring one
from the Hub or a directory (`hf_tokenizer`), and tokenize a corpus with one into Levanter
token caches (`tokenize`).

Declared here, cheap to import; the steps are tokenizers.py and tokenize.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.context import Context
from marinbuild.targets.rule import Execution, Resources, RetryPolicy, Rule
from rules.common.corpus import SUMMARY
from rules.common.hub import ALLOW_UNPINNED, HUB_ENV, NO_TORCH, check_pinned
from rules.tokenize.constants import DEFAULT_SPECIAL_TOKENS, SPECIAL_ROLES, TOKENIZE_RESOURCES

_STEPS = ("rules.tokenize.tokenizers",)

# -- bpe_tokenizer --------------------------------------------------------------------------


def _bpe_tokenizer(ctx: Context) -> None:
    from rules.tokenize.tokenizers import bpe_tokenizer as train

    train(ctx)


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
    code_modules=_STEPS,
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
    from rules.tokenize.tokenizers import hf_tokenizer as bring

    bring(ctx)


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
    code_modules=_STEPS,
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


# -- tokenize -------------------------------------------------------------------------------


def _tokenize(ctx: Context) -> None:
    from rules.tokenize.tokenize import tokenize as run

    run(ctx)


tokenize = Rule(
    name="tokenize",
    metrics_file=SUMMARY,
    impl=_tokenize,
    execution=Execution.SUBPROCESS,
    packages=("levanter", "tokenizers", "transformers"),
    env=(NO_TORCH,),
    resources=TOKENIZE_RESOURCES,
    retry=RetryPolicy(worker_lost=3, failed=1),
    code_modules=("rules.tokenize.tokenize", *_STEPS),
    doc=(
        "Tokenize a corpus into Levanter token caches. Output: train/ and validation/ caches "
        "(point a Levanter text dataset config's cache_dir here), tokenizer/ (a copy of the "
        "tokenizer) and summary.json with document and token counts."
    ),
    attrs={
        "data": Attr(types.LABEL, doc="A data rule's output (text_files, hf_dataset, python_corpus)."),
        "tokenizer": Attr(types.LABEL, doc="A tokenizer rule's output (bpe_tokenizer, hf_tokenizer)."),
        "ray_min_documents": Attr(
            types.INT,
            default=1_000_000,
            doc=(
                "Use Levanter's Ray cache builder from this many documents. Its caches hold the "
                "same tokens, but their ledgers name shards differently, so this is part of the key."
            ),
        ),
    },
)
