"""`train_fasttext`: a supervised fastText classifier trained on labelled corpora.

Generic on purpose: `data` maps corpora (any data rule's output) to fastText labels, so the
same rule trains the language-ID model of `filter_text`'s language filter
(`{":english": "en", ":phrases": "other"}`, offline: `translated_phrases` is non-English
text every machine has) and any other classifier of documents. Each document is one line
of fastText's training file (`__label__en the text ...`, `one_line`); the train splits
train, the validation splits measure (precision and recall per label, in summary.json).

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
fastText drops them) and `bucket x dim` >= 2^23 floats. Then the same documents and
hyper-parameters give the same model bytes (tested).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from marinbuild.targets import Attr, Execution, Resources, Rule
from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Field, JsonValue
from marinbuild.targets.context import Context, StepFailed
from rules.corpus_shards import SUMMARY, corpus_root
from rules.webdata.documents import Skips, read_documents
from rules.webdata.filters import LABEL_PREFIX

MODEL = "model.bin"
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


def one_line(text: str) -> str:
    """A document as fastText reads one: a line, whitespace runs one space."""
    return " ".join(text.split())


def _write_label(label: str, texts: Iterable[str], out: TextIO) -> int:
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


# -- the rule -------------------------------------------------------------------------------


def _check(attrs: Mapping[str, JsonValue]) -> None:
    """At load: labels fastText can hold, two of them at least, and valid hyper-parameters."""
    labels = list(attrs["data"].values())
    bad = [label for label in labels if not isinstance(label, str) or not LABEL.fullmatch(label)]
    if bad:
        raise ValueError(f"data maps each corpus to a label of letters, digits, '_' or '-', got {bad[0]!r}")
    if len(set(labels)) < 2:
        raise ValueError(f"data needs at least two labels to tell apart, got {sorted(set(labels))}")
    problems = hyperparameter_problems(attrs["hyperparameters"])
    if problems:
        raise ValueError("hyperparameters: " + "; ".join(problems))


def _texts(roots: list[Path], split: str, skips: Skips) -> Iterator[str]:
    for root in roots:
        for shard in sorted((root / split).glob("shard-*.jsonl")):
            yield from (document.text for document in read_documents(shard, skips))


def _labelled_file(corpora: Mapping[str, list[Path]], split: str, work: Path, skips: Skips) -> dict[str, int]:
    """`work/{split}.txt`: every document of `split` of each label's corpora, interleaved;
    returns the documents per label."""
    files = {label: work / f"{split}.{label}.txt" for label in corpora}
    counts = {}
    for label, roots in corpora.items():
        with open(files[label], "w", encoding="utf-8") as out:
            counts[label] = _write_label(label, _texts(roots, split, skips), out)
    present = {label: path for label, path in files.items() if counts[label]}
    interleave(present, counts, work / f"{split}.txt")
    return counts


def _train_fasttext(ctx: Context) -> None:
    corpora: dict[str, list[Path]] = {}
    for data, label in ctx.attrs["data"].items():
        corpora.setdefault(label, []).append(corpus_root(ctx.files(data)))
    skips = Skips()
    train = _labelled_file(corpora, "train", ctx.tmp, skips)
    empty = [label for label, count in train.items() if not count]
    if empty:
        raise StepFailed(f"label {empty[0]!r} has no document with text in the train split of its corpora")
    ctx.progress(0, None, f"training on {sum(train.values()):,} documents")
    trained = train_supervised(ctx.tmp / "train.txt", ctx.attrs["hyperparameters"], ctx.out / MODEL)
    validation = _labelled_file(corpora, "validation", ctx.tmp, skips)
    scores = trained.test_label(str(ctx.tmp / "validation.txt")) if sum(validation.values()) else {}
    labels = {
        label: {
            "train": train[label],
            "validation": validation[label],
            **{
                name: round(value, 6)
                for name, value in scores.get(f"{LABEL_PREFIX}{label}", {}).items()
                if name in ("precision", "recall", "f1score")
            },
        }
        for label in corpora
    }
    summary = {"labels": labels, "skipped": skips.to_json()}
    (ctx.out / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


def _headline(out: Path) -> str | None:
    labels = json.loads((out / SUMMARY).read_text())["labels"]
    scores = [f"{label} F1 {item['f1score']:.3f}" for label, item in labels.items() if "f1score" in item]
    return "validation: " + ", ".join(scores) if scores else None


train_fasttext = Rule(
    name="train_fasttext",
    impl=_train_fasttext,
    execution=Execution.SUBPROCESS,
    validate=_check,
    packages=("fasttext-numpy2",),
    metrics_file=SUMMARY,
    headline=_headline,
    resources=Resources(cpu=1),
    doc=(
        "A supervised fastText classifier of documents, trained on the train splits of labelled corpora "
        "(one thread: the same inputs give the same model). Output: model.bin, and summary.json (documents "
        "per label, and precision, recall and F1 per label on the validation splits)."
    ),
    attrs={
        "data": Attr(
            types.LABEL_KEYED_DICT, doc="Each corpus (a data rule's output) and its label: {':english': 'en', ...}."
        ),
        "hyperparameters": Attr(
            HYPERPARAMETERS,
            default=HYPERPARAMETERS.normalize({}, ""),
            doc="fastText's settings: epoch, lr, dim, word_ngrams, minn, maxn, ... (each defaulted)",
        ),
    },
)
