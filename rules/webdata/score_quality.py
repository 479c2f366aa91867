"""`score_quality`'s step: a corpus scored by a fastText quality classifier and cut, shard
by shard.

A sharded rule (docs/rules.md#sharded-steps) in two phases: a *score* unit per shard,
keyed by the shard's content, its file name and the model's content, writes the shard's
documents with their score in `metadata.quality_score` and a histogram of the scores;
then the cut is `threshold`, or for `top_fraction` the edge the driver finds over every
shard's histogram (`top_fraction_cut`); then a *cut* unit per shard, keyed by the scored
shard's content and the cut, keeps the documents at or above it and puts the others under
`rejected/`. Changing the cut scores nothing again.

The summary records the scores' distribution (`distributions`: min, max, quantiles and a
histogram, from the score units' histograms added up, `score_distribution`) with where the
cut falls; a `threshold` that keeps none or all of the documents is a warning of the build.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from marinbuild.targets import ShardUnit
from marinbuild.targets.context import Context, StepFailed
from marinbuild.targets.distributions import Distribution
from rules.common.corpus import PROGRESS_EVERY, SPLITS, SUMMARY, check_not_emptied, corpus_root
from rules.webdata.blocks.documents import Skips, read_documents
from rules.webdata.blocks.filters.scores import QUALITY_SCORE, QualityThreshold
from rules.webdata.blocks.score_distribution import distribution, score_range
from rules.webdata.constants import MODEL, REJECTED

_SCORED, _HISTOGRAM = "scored.jsonl", "histogram.npy"  # a score unit's outputs
_KEPT, _REJECTED, _COUNTS = "kept.jsonl", "rejected.jsonl", "counts.json"  # a cut unit's outputs


def score_unit(ctx: Context) -> None:
    """One unit: a shard's documents with their scores, and the scores' histogram."""
    import numpy as np

    from rules.webdata.blocks.quality import QualityScorer
    from rules.webdata.blocks.score_distribution import score_histogram

    shard = ctx.tmp / ctx.attrs["shard_name"]  # documents without an id are named after it
    shard.symlink_to(ctx.location("shard"))
    scorer = QualityScorer(ctx.location("model"))
    skips = Skips()
    scores = []
    with open(ctx.out / _SCORED, "w", encoding="utf-8") as out:
        for document in read_documents(shard, skips):
            scored = scorer.annotate(document)
            scores.append(scored.metadata[scorer.field])
            out.write(json.dumps(scored.to_json(), ensure_ascii=False) + "\n")
            if len(scores) % PROGRESS_EVERY == 0:
                ctx.progress(len(scores), None, "docs")
    ctx.progress(len(scores), None, "docs")
    np.save(ctx.out / _HISTOGRAM, score_histogram(scores), allow_pickle=False)
    (ctx.out / _COUNTS).write_text(json.dumps({"skipped": skips.to_json(), "scores": score_range(scores)}))


def cut_unit(ctx: Context) -> None:
    """One unit: a scored shard's documents at or above the cut, and the others apart."""
    keep = QualityThreshold(threshold=ctx.attrs["threshold"])
    skips = Skips()
    counts = {"kept": 0, "rejected": 0}
    with open(ctx.out / _KEPT, "w", encoding="utf-8") as kept, open(ctx.out / _REJECTED, "w", encoding="utf-8") as out:
        for document in read_documents(ctx.location("shard"), skips):
            verdict = keep.apply(document)
            if isinstance(verdict, str):
                out.write(json.dumps({**document.to_json(), "reason": verdict}, ensure_ascii=False) + "\n")
                counts["rejected"] += 1
            else:
                kept.write(json.dumps(document.to_json(), ensure_ascii=False) + "\n")
                counts["kept"] += 1
    if skips.total:
        raise StepFailed(f"a scored shard has lines that are not documents: {skips.to_json()}")
    (ctx.out / _COUNTS).write_text(json.dumps(counts))


def _model(ctx: Context) -> Path:
    for path in ctx.files(ctx.attrs["classifier"]):
        if path.name == MODEL:
            return path
    raise StepFailed(f"{ctx.attrs['classifier']} has no {MODEL}: expected a train_quality_classifier target")


def score_quality(ctx: Context) -> None:
    """The driver: score every shard, find the cut, cut every shard."""
    import numpy as np

    from rules.webdata.blocks.quality import top_fraction_cut

    root = corpus_root(ctx.files(ctx.attrs["data"]))
    model = _model(ctx)
    shards = [
        (f"{split}/{path.name}", path) for split in SPLITS for path in sorted((root / split).glob("shard-*.jsonl"))
    ]
    scored = ctx.map_shards(
        "rules.webdata.score_quality:score_unit",
        [ShardUnit(name, {"shard": path, "model": model}, {"shard_name": path.name}) for name, path in shards],
    )
    threshold = ctx.attrs["threshold"]
    if threshold is None:
        threshold = top_fraction_cut((np.load(result.path(_HISTOGRAM)) for result in scored), ctx.attrs["top_fraction"])
    cut = ctx.map_shards(
        "rules.webdata.score_quality:cut_unit",
        [ShardUnit(result.name, {"shard": result.path(_SCORED)}, {"threshold": threshold}) for result in scored],
    )
    documents: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    skipped: dict[str, dict[str, Any]] = {}
    for scores, result in zip(scored, cut):
        split = Path(result.name).parent.name
        result.place(_KEPT, ctx.out / result.name)
        result.place(_REJECTED, ctx.out / REJECTED / result.name)
        counts = result.read_json(_COUNTS)
        documents[split] += counts["kept"]
        rejected[split] += counts["rejected"]
        for reason, skip in scores.read_json(_COUNTS)["skipped"].items():
            known = skipped.setdefault(reason, {"count": 0, "first": f"{split}/{skip['first']}"})
            known["count"] += skip["count"]
    summary = {
        "documents": {split: documents[split] for split in SPLITS},
        "rejected": {split: rejected[split] for split in SPLITS},
        "threshold": threshold,
        "top_fraction": ctx.attrs["top_fraction"],
        "skipped": skipped,
    }
    histograms = (np.load(result.path(_HISTOGRAM)) for result in scored)
    ranges = [result.read_json(_COUNTS)["scores"] for result in scored]
    found = distribution(QUALITY_SCORE, histograms, ranges, threshold, sum(documents.values()))
    if found is not None:
        summary["distributions"] = [found.to_json()]
    (ctx.out / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    # A threshold given that does not cut; before the step may fail for having kept nothing.
    if found is not None and ctx.attrs["top_fraction"] is None and (warning := found.warning()):
        ctx.warn(warning)
    seen = {split: documents[split] + rejected[split] for split in SPLITS}
    edge = f"the threshold {threshold}" if ctx.attrs["top_fraction"] is None else f"the cut {threshold:.4g}"
    check_not_emptied(seen, summary["documents"], f"{edge} rejected", lambda: _score_range(found))


def _score_range(found: Distribution | None) -> str:
    """The lowest and highest score, for the line of a cut that kept nothing."""
    return "" if found is None else f"scores {found.minimum:.{found.decimals}f}–{found.maximum:.{found.decimals}f}"
