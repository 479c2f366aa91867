"""Every patch marinbuild makes to a library it runs, in one place.

A patch replaces something of a library (a function of one of its modules, a method of one
of its classes) for the length of a `with` block, and puts the library's own back when the
block ends, however it ends. Each patch here says what the library does wrong, in which
version (the one pyproject.toml pins), and what would let us drop it; for each,
tests/rules/common/test_library_patches.py shows the library's own behaviour that makes it necessary,
so that the test fails, telling us to drop the patch, once the library no longer behaves so.

Every patch is of Levanter 1.2.dev1644 (with jax 0.7.2), made by the runtime around
Levanter's entry points (rules/common/levanter/training.py, rules/posttrain/sft_lm.py).
"""

from __future__ import annotations

import rules.common.levanter.environment  # noqa: F401  (first: offline, before Levanter)

import ast
import contextlib
import logging
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import levanter.tracker
from levanter.compat.hf_checkpoints import HFCheckpointConverter
from levanter.main import train_lm as levanter_train_lm
from levanter.metrics import Metric, ReductionType
from levanter.models.lm_model import LmConfig
from levanter.models.mixtral import MixtralConfig

# Levanter's name for the router losses it logs; the trainer adds the same prefix again.
_TRAIN_PREFIX = "train/"
# The logger of Levanter's token caches, the start of its warning that a cache's metadata is
# not its reader's, and the one difference that warning need not show (quiet_tokenizer_name).
_CACHE_LOGGER = "levanter.store.cache"
_MISMATCH = "Metadata mismatch: "
_TOKENIZER_NAME = {"values_changed": ["root.preprocessor_metadata['tokenizer']"]}


@contextlib.contextmanager
def _replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    """`owner.name` (a module's function, a class's method) is `value` while the block runs.
    What is put back is the attribute as `owner` holds it (a staticmethod stays one)."""
    own = vars(owner)[name]
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, own)


@contextlib.contextmanager
def router_metrics(model: LmConfig, entry: ModuleType = levanter_train_lm) -> Iterator[None]:
    """While the block runs, Levanter's `train_lm` (or `entry`, another of its entry points
    that trains with `compute_next_token_loss`: `lora_lm`) trains a mixture of experts
    (`model`) with its router's statistics as metrics; nothing changes for another family.

    What Levanter does wrong: its Mixtral reports its router (the load-balancing loss, the
    router z-loss, each layer's routing entropy and expert loads) with
    `levanter.tracker.jit_log`. Outside a `levanter.tracker.defer_tracker_for_jit` block
    that sends the values to the host with `jax.experimental.io_callback`, which JAX
    refuses under differentiation ("IO callbacks do not support JVP"), and Levanter's
    trainer opens no such block: as shipped, a Mixtral fails at its first training step.

    The patch: `levanter.main.train_lm.compute_next_token_loss` (the loss function
    `train_lm.main` builds its trainer with; `lora_lm`'s likewise) opens the block and
    returns what the model logged as the loss function's own metrics, which Levanter's
    trainer already reduces over microbatches and hosts and logs in the step's row as
    `train/<name>`: `train/load_balancing_loss`, `train/router_z_loss`,
    `train/moe/layer<i>/routing_entropy`, `train/moe/layer<i>/expert<j>_load`. The loss
    itself (router losses included) is Levanter's. Evaluation runs the model without
    differentiating it, where the callback works: there the statistics reach the trackers
    as values of no step, which `metrics.jsonl` does not record.

    Drop it when a Mixtral's loss can be differentiated as Levanter ships it (Levanter's
    trainer collects what the loss logs, or its Mixtral returns its statistics as
    metrics): then the trainer logs them itself, if under other names.
    """
    if not isinstance(model, MixtralConfig):
        yield
        return
    compute_loss = entry.compute_next_token_loss

    def loss_and_router_metrics(*args: Any, **kwargs: Any) -> tuple[Any, dict[str, Metric]]:
        with levanter.tracker.defer_tracker_for_jit() as logged:
            loss = compute_loss(*args, **kwargs)
        # Each value is one batch's (a mean over its tokens): the step's is their mean.
        return loss, {
            name.removeprefix(_TRAIN_PREFIX): Metric.from_value(value, ReductionType.MEAN)
            for name, value in logged.items()
        }

    with _replaced(entry, "compute_next_token_loss", loss_and_router_metrics):
        yield


@contextlib.contextmanager
def converter_for_every_checkpoint(converter: HFCheckpointConverter) -> Iterator[None]:
    """While the block runs, Levanter's `HFCheckpointConverter.from_hf` returns `converter`,
    whatever checkpoint it is asked about: for `levanter.main.lora_lm.main`, which finds the
    base model's converter with it, to run offline.

    What Levanter does wrong: `from_hf` finds the Levanter config class of a checkpoint by
    instantiating the default config of every model family Levanter knows and building its
    converter, until one's Hugging Face config class is the checkpoint's; gpt2's comes
    first, and its converter reads its reference config (`gpt2`) from the Hugging Face
    Hub. Without a network (a build never reaches it: `HF_HUB_OFFLINE=1`) `from_hf` raises
    for every checkpoint, a local Llama's included; with one, it downloads gpt2's config.
    `lora_lm` has no other way to be given the converter.

    Drop it when `from_hf` reads nothing but the checkpoint it is given (or `lora_lm`
    takes a converter or a model config).
    """
    with _replaced(HFCheckpointConverter, "from_hf", staticmethod(lambda *_args, **_kwargs: converter)):
        yield


class _OnlyTheTokenizerName(logging.Filter):
    """Leaves out Levanter's "Metadata mismatch" warnings whose one difference is the
    tokenizer's name; every other record, another mismatch included, goes through."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(_MISMATCH):
            return True
        try:
            difference = ast.literal_eval(message.removeprefix(_MISMATCH))
        except (ValueError, SyntaxError):  # a difference of types, say: not only a name
            return True
        shown = {kind: sorted(paths) for kind, paths in difference.items()} if isinstance(difference, dict) else None
        return shown != _TOKENIZER_NAME


@contextlib.contextmanager
def quiet_tokenizer_name() -> Iterator[None]:
    """While the block runs, Levanter does not warn that a token cache was written with a
    tokenizer of another name than its reader's, when that name is all that differs.

    What Levanter does wrong: a cache's ledger records its processor's metadata, the
    tokenizer's `name_or_path` among it, and `CacheLedger.load` warns "Metadata mismatch"
    (a pretty-printed DeepDiff of three lines) whenever the reader's differs, though the
    name changes no token. `tokenize` writes its caches under a fixed name (`tokenizer`,
    so that the same tokens are the same bytes wherever the tokenizer lies) and Levanter's
    reader names the tokenizer by its path in the store: every cache's every split,
    loaded by each train_lm and eval_lm (and by each worker of a multi-host run), warned,
    flooding the logs with what is no problem. A difference in anything else (the
    vocabulary's size, BOS or EOS) is still shown: that one is.

    The patch: a filter on Levanter's cache logger (`levanter.store.cache`) that leaves out
    that warning when its one difference is the tokenizer's name.

    Drop it when Levanter's ledger compares only what changes the tokens, or its reader
    can be given the name a cache was written with.
    """
    logger = logging.getLogger(_CACHE_LOGGER)
    quiet = _OnlyTheTokenizerName()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)
