"""fastText as the web-data blocks use it: a training file of labelled lines, a supervised
classifier trained deterministically, and a model loaded once per process.

Training is deterministic: fastText runs on one thread with the given seed, the training
file interleaves the labels in proportion (never one label's documents first, whose order
plain SGD would learn) without holding them in memory, and the input matrix is large
enough to be zeros where fastText leaves it uninitialised. That last point needs care:
fastText (0.9.2 to today's, fasttext-numpy2 0.10.4 too) initialises its input matrix in
ten blocks, one per thread (`DenseMatrix::uniform`), so on one thread only the first
tenth is drawn and the rest is whatever memory the allocator returns — on a second
training in one process, other bytes each time (measured: 7 different models of 8). A
block of at least 32 MiB is always mapped fresh from the kernel by glibc's allocator (its
mmap threshold is 32 MiB at most), which is zeros; so the hashed n-gram rows must be used
(character n-grams, `maxn` > 0, or word n-grams, `word_ngrams` > 1: without either
fastText drops them) and `bucket x dim` >= 2^23 floats (`MIN_INPUT_FLOATS`). Then the
same documents and hyper-parameters give the same model bytes (tested).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Field, JsonValue
from marinbuild.targets.context import StepFailed

LABEL_PREFIX = "__label__"
MIN_INPUT_FLOATS = 2**23  # bucket x dim: 32 MiB of float32, always fresh zeroed pages (see above)


LABEL = re.compile(r"[A-Za-z0-9_-]+")  # a fastText label: no whitespace, nothing to escape

# fastText's supervised settings, by its names in snake case. The defaults are those of a
# language-ID model (fastText's lid.176: dim 16, character n-grams of 2 to 4), with the
# bucket count that makes its input matrix 32 MiB.
HYPERPARAMETERS = types.struct(
    [
        Field("epoch", int, 5),
        Field("lr", float, 0.1),
        Field("dim", int, 16),
        Field("word_ngrams", int, 1),
        Field("minn", int, 2, doc="shortest character n-gram (0: none)"),
        Field("maxn", int, 4, doc="longest character n-gram (0: none)"),
        Field("min_count", int, 1),
        Field("bucket", int, MIN_INPUT_FLOATS // 16, doc="hashed n-gram rows"),
        Field("loss", str, "softmax", choices=("softmax", "hs", "ns", "ova")),
        Field("seed", int, 1, doc="fastText takes a seed of 0 as 1: 1 to 2**31 - 1"),
    ]
)


def hyperparameter_problems(settings: Mapping[str, JsonValue]) -> list[str]:
    """What is wrong with a value of HYPERPARAMETERS (its fields' kinds are checked before)."""
    wrong = [f"'{name}' must be at least 1" for name in ("epoch", "dim", "min_count", "bucket") if settings[name] < 1]
    if not 0 < settings["lr"] <= 10:
        wrong.append(f"'lr' must be above 0 and at most 10, got {settings['lr']}")
    if not 0 <= settings["minn"] <= settings["maxn"] or settings["word_ngrams"] < 1:
        wrong.append("need 0 <= minn <= maxn and word_ngrams >= 1")
    if not wrong and (
        (settings["maxn"] == 0 and settings["word_ngrams"] < 2)
        or settings["bucket"] * settings["dim"] < MIN_INPUT_FLOATS
    ):
        wrong.append(
            f"need character n-grams (maxn > 0) or word n-grams (word_ngrams >= 2), and bucket x dim >= "
            f"{MIN_INPUT_FLOATS:,} (a 32 MiB input matrix), got bucket {settings['bucket']} x dim {settings['dim']}: "
            "fastText on one thread initialises a tenth of a smaller matrix and leaves the rest to chance"
        )
    if not 1 <= settings["seed"] < 2**31:  # std::minstd_rand takes a seed of 0 as 1: one model, two keys
        wrong.append(f"'seed' must be between 1 and 2**31 - 1, got {settings['seed']}")
    return wrong


@functools.cache
def fasttext_model(path: str, role: str) -> Any:
    """The fastText model at `path` (a `role` model: language, quality), loaded once per process."""
    import fasttext

    try:
        return fasttext.load_model(path)
    except ValueError as error:
        raise StepFailed(f"cannot load the fastText {role} model {path}: {error}") from None


def one_line(text: str) -> str:
    """A document as fastText reads one: a line, whitespace runs one space."""
    return " ".join(text.split())


def write_label(label: str, texts: Iterable[str], out: TextIO) -> int:
    """Each text with words as a line of `label` into `out`; returns how many."""
    count = 0
    for text in texts:
        if line := one_line(text):
            out.write(f"{LABEL_PREFIX}{label} {line}\n")
            count += 1
    return count


def interleave(files: Mapping[str, Path], counts: Mapping[str, int], out: Path) -> None:
    """Every line of each label's file into `out`, in proportion: the next line is always
    the label furthest behind its share (ties in `files`' order), read one at a time."""
    handles = {label: open(path, encoding="utf-8") for label, path in files.items()}
    try:
        taken = dict.fromkeys(files, 0)
        with open(out, "w", encoding="utf-8") as lines:
            for _ in range(sum(counts.values())):
                label = min(
                    (label for label in files if taken[label] < counts[label]), key=lambda x: taken[x] / counts[x]
                )
                lines.write(handles[label].readline())
                taken[label] += 1
    finally:
        for handle in handles.values():
            handle.close()


def train_supervised(training_file: Path, settings: Mapping[str, JsonValue], model: Path) -> Any:
    """Train on `training_file` (labelled lines) with HYPERPARAMETERS `settings` on one
    thread, and save the model at `model`; returns the fastText model."""
    import fasttext

    trained = fasttext.train_supervised(
        str(training_file),
        epoch=settings["epoch"],
        lr=settings["lr"],
        dim=settings["dim"],
        wordNgrams=settings["word_ngrams"],
        minn=settings["minn"],
        maxn=settings["maxn"],
        minCount=settings["min_count"],
        bucket=settings["bucket"],
        loss=settings["loss"],
        seed=settings["seed"],
        thread=1,
        verbose=0,
    )
    trained.save_model(str(model))
    return trained
