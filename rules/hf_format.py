"""What a Hugging Face checkpoint directory must hold to be read: checked from its files.

`hf_model` checks its input with `check_checkpoint` before it publishes anything, and
`train_lm(init_from_hf = ...)` again before Levanter loads it (the label may name any
target holding such a directory), so that a directory without weights or of another model
family fails with one line naming what is missing — not with a traceback from deep inside
transformers or Levanter. Nothing here imports an ML library.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from marinbuild.targets.context import StepFailed
from rules.lm_config import FAMILIES

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
TOKENIZER = "tokenizer.json"
# What a checkpoint is made of (the Hub's names): config, weights, tokenizer.
CHECKPOINT_FILES = [
    CONFIG,
    "generation_config.json",
    "*.safetensors",
    WEIGHTS_INDEX,
    TOKENIZER,
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
]


def checkpoint_directory(files: Iterable[Path]) -> Path:
    """The directory of a checkpoint among an input's files: the one holding config.json."""
    found = sorted({path.parent for path in files if path.name == CONFIG})
    if len(found) != 1:
        raise StepFailed(f"expected one Hugging Face checkpoint (a directory holding {CONFIG}), found {len(found)}")
    return found[0]


def check_checkpoint(directory: Path, family: str, shown: str) -> dict:
    """config.json of the checkpoint in `directory` (called `shown` in errors), once it is
    known to be of `family` (a family of rules/lm_config.py: its config.json says the
    family's Hugging Face `model_type`), with safetensors weights and a fast tokenizer."""
    try:
        config = json.loads((directory / CONFIG).read_text())
    except FileNotFoundError:
        raise StepFailed(f"{shown} is not a Hugging Face checkpoint: it has no {CONFIG}") from None
    except ValueError as error:
        raise StepFailed(f"{shown}: {CONFIG} is not JSON ({error})") from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    expected = FAMILIES[family].hf_model_type
    if model_type != expected:
        named = "" if expected == family else f" (model_type {expected!r})"
        raise StepFailed(f"{shown}: {CONFIG} says model_type {model_type!r}, not the declared family {family!r}{named}")
    missing = _missing_weights(directory)
    if missing:
        raise StepFailed(f"{shown} holds no weights: {missing}")
    if not (directory / TOKENIZER).is_file():
        raise StepFailed(f"{shown} has no {TOKENIZER}: Levanter needs a fast tokenizer")
    return config


def _missing_weights(directory: Path) -> str | None:
    """What is missing of the safetensors weights, or None."""
    if (directory / WEIGHTS).is_file():
        return None
    index = directory / WEIGHTS_INDEX
    if not index.is_file():
        other = " (pytorch_model.bin is not read: save it as safetensors)" if any(directory.glob("*.bin")) else ""
        return f"no {WEIGHTS} and no {WEIGHTS_INDEX}{other}"
    try:
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"{WEIGHTS_INDEX} has no weight_map"
    absent = [shard for shard in shards if not (directory / shard).is_file()]
    return f"{WEIGHTS_INDEX} names shards that are not there: {', '.join(absent)}" if absent else None
