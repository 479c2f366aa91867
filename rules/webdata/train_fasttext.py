"""`train_fasttext`'s step: a supervised fastText classifier trained on labelled corpora.

Each document is one line of fastText's training file (`__label__en the text ...`); the
train splits train, the validation splits measure (precision and recall per label, in
summary.json). blocks/fasttext.py says how the training stays deterministic.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

from marinbuild.targets.context import Context, StepFailed
from rules.common.corpus import SUMMARY, corpus_root
from rules.webdata.blocks.documents import Skips, read_documents
from rules.webdata.blocks.fasttext import LABEL_PREFIX, interleave, train_supervised, write_label
from rules.webdata.constants import MODEL


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
            counts[label] = write_label(label, _texts(roots, split, skips), out)
    present = {label: path for label, path in files.items() if counts[label]}
    interleave(present, counts, work / f"{split}.txt")
    return counts


def train_fasttext(ctx: Context) -> None:
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
