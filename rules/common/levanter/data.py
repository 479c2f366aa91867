"""What a Levanter run reads: the token caches of tokenize targets as one data mixture,
and directories of the store (a tokenizer, a checkpoint) as local files.

Locations are local directories or store URLs (`gs://...`): Levanter reads token caches
and checkpoints from either, so on a shared store nothing but the small tokenizer
directory is downloaded.
"""

from __future__ import annotations

import rules.common.levanter.environment  # noqa: F401  (first: offline, before Levanter)

from collections.abc import Mapping
from pathlib import Path

import blake3
import fsspec
from fsspec.implementations.local import LocalFileSystem
from levanter.data.text import LmDatasetFormatBase, LMMixtureDatasetConfig, TextLmDatasetFormat, UrlDatasetSourceConfig

from marinbuild.targets.context import StepFailed
from rules.common.corpus import SPLITS
from rules.common.training_files import TOKENIZER_DIR

# What a tokenize target's caches hold: tokenized text.
TEXT_FORMAT = TextLmDatasetFormat()


def tokenized_sets(inputs: Mapping[str, str], tmp: Path) -> tuple[dict[str, str], Path]:
    """{tag: output location} for tokenize targets ({label: location}), and a local copy of
    their (shared) tokenizer. Tags are target names (metrics read `eval/<tag>/loss`), or
    whole labels where two targets share a name."""
    names = [label.rpartition(":")[2] for label in inputs]
    sets: dict[str, str] = {}
    for (label, location), name in zip(inputs.items(), names):
        fs, root = fsspec.core.url_to_fs(location)
        missing = [part for part in (*SPLITS, TOKENIZER_DIR) if not fs.isdir(f"{root}/{part}")]
        if missing:
            raise StepFailed(
                f"{label} is not a tokenized data set (no {', '.join(missing)} in its output); use a tokenize target"
            )
        sets[name if names.count(name) == 1 else label.lstrip("/")] = location
    tokenizers = {
        tag: local_copy(f"{location}/{TOKENIZER_DIR}", tmp / "tokenizers" / str(index))
        for index, (tag, location) in enumerate(sets.items())
    }
    if len({tokenizer_digest(directory) for directory in tokenizers.values()}) > 1:
        raise StepFailed(
            f"the data sets were tokenized with different tokenizers: {sorted(sets)}; tokenize them with the same one"
        )
    return sets, next(iter(tokenizers.values()))


def local_copy(location: str, local: Path) -> Path:
    """A directory of the store as local files, for the libraries that read only those
    (transformers): `location` itself on a local store, else a copy downloaded into `local`."""
    fs, root = fsspec.core.url_to_fs(location)
    if isinstance(fs, LocalFileSystem):
        return Path(root)
    local.mkdir(parents=True)
    for path in fs.find(root):
        target = local / path[len(root) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(path, str(target))
    return local


def read_text(location: str) -> str:
    with fsspec.open(location, "r") as file:
        return file.read()


def tokenizer_digest(directory: Path) -> str:
    return blake3.blake3((directory / "tokenizer.json").read_bytes()).hexdigest()


def data_config(
    sets: Mapping[str, str],
    weights: Mapping[str, float],
    tokenizer: Path,
    format: LmDatasetFormatBase = TEXT_FORMAT,
) -> LMMixtureDatasetConfig:
    """A Levanter mixture over prebuilt caches (one component for a single data set). A
    mixture restarts a component that runs out, so a run always lasts its steps (a single
    Levanter data set would stop training silently at the end of the data). `format` is
    what the caches hold: tokenized text (tokenize), or chat (sft_lm)."""
    return LMMixtureDatasetConfig(
        tokenizer=str(tokenizer),
        cache_dir=None,
        configs={tag: UrlDatasetSourceConfig(cache_dir=location, format=format) for tag, location in sets.items()},
        train_weights=dict(weights),
        shuffle=True,
        permutation_type="feistel",
    )
