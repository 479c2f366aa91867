"""`train_quality_classifier`'s step: a fastText quality classifier (blocks/quality.py:
DCLM's fastText bigrams) trained on the train splits of two corpora, deterministically,
so the same documents and hyper-parameters give the same model file and every key
downstream stays the same."""

from __future__ import annotations

import json
from collections.abc import Iterator

from marinbuild.targets.context import Context
from rules.common.corpus import SUMMARY, corpus_root
from rules.webdata.blocks.documents import Document, Skips, read_documents
from rules.webdata.blocks.quality import QualityHyperparameters, train_classifier
from rules.webdata.constants import MODEL


def _train_documents(ctx: Context, label: str, skips: Skips) -> Iterator[Document]:
    for shard in sorted((corpus_root(ctx.files(label)) / "train").glob("shard-*.jsonl")):
        yield from read_documents(shard, skips)


def train_quality_classifier(ctx: Context) -> None:
    """Train the model on the positive and negative corpora's train splits."""
    skips = Skips()
    trained = train_classifier(
        _train_documents(ctx, ctx.attrs["positive"], skips),
        _train_documents(ctx, ctx.attrs["negative"], skips),
        QualityHyperparameters.from_spec(ctx.attrs["hyperparameters"]),
        ctx.out / MODEL,
        ctx.tmp / "training",
    )
    summary = {**trained.to_json(), "skipped": skips.to_json()}
    (ctx.out / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
