"""`filter_text`: a chain of document filters over a corpus, shard by shard.

A sharded rule (docs/rules.md#sharded-steps): each shard of the input corpus is a unit of
its own, keyed by the shard's content, its name (documents without an id are named after
it) and the filters' parameters, so adding a shard filters only that shard and changing a
filter's parameter filters every shard again, and nothing upstream. The output is a
corpus in the layout of every data rule (`train/`, `validation/`, `summary.json`), with
each rejected document beside it under `rejected/`, with the filter that rejected it and
why, and `summary.json` counting what each filter saw, kept and rejected, and the input
lines skipped (not JSON, no text...), by reason. A filter with a threshold on a score
(`ThresholdFilter`: language, quality_threshold) has its scores' distribution in
`summary.json` too (`distributions`): each unit counts them into a histogram of fixed bins,
which the driver adds up (`score_distribution`), and a threshold that keeps none or all of
the documents it scored is a warning of the build.

The language filter's fastText model is an input of the step, `language_model`: a label
(a `train_fasttext` target, an `external` directory pinned by its digest, a source file),
never a path in the filter's spec. Each unit reads it as a file of its own, so its
content digest is in every unit's key: another model filters every shard again, and
the same model under another name or place reruns nothing. In the chain's specs (and in
summary.json) the filter's `model` names that input: `"language_model"`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marinbuild.targets import ShardResult, ShardUnit
from marinbuild.targets.attrs import JsonValue
from marinbuild.targets.context import Context, StepFailed
from marinbuild.targets.distributions import Distribution
from rules.common.corpus import PROGRESS_EVERY, SPLITS, SUMMARY, check_not_emptied, corpus_root, split_counts
from rules.webdata.blocks.documents import Skips, read_documents
from rules.webdata.blocks.filters.base import ThresholdFilter
from rules.webdata.blocks.filters.chain import FilterChain, FilterCounts, Rejection, make_filter
from rules.webdata.blocks.filters.scores import with_model
from rules.webdata.blocks.score_distribution import distribution, score_range
from rules.webdata.constants import LANGUAGE_MODEL, MODEL_SUFFIXES, REJECTED

_KEPT, _REJECTED, _COUNTS = "kept.jsonl", "rejected.jsonl", "counts.json"  # a unit's outputs
_COUNTED = ("name", "seen", "kept", "rejected", "reasons")  # what a unit counts of each filter
_SCORES = "scores-{index}.npy"  # a unit's histogram of the scores of the chain's filter `index`, if it has a threshold


def language_specs(filters: list[Mapping[str, JsonValue]]) -> list[Mapping[str, JsonValue]]:
    """The chain's specs as units read them: the language filter's model is the unit's file."""
    return [with_model(spec, LANGUAGE_MODEL) for spec in filters]


def _model_file(ctx: Context) -> Path:
    """The one fastText model file (*.bin, *.ftz) the language_model input holds."""
    label = ctx.attrs[LANGUAGE_MODEL]
    models = [path for path in ctx.files(label) if path.name.endswith(MODEL_SUFFIXES)]
    if len(models) != 1:
        found = ", ".join(path.name for path in models) or "none"
        raise StepFailed(f"{label} must hold exactly one fastText model file (*.bin or *.ftz), it holds {found}")
    return models[0]


def filter_shard(ctx: Context) -> None:
    """One unit: the documents of one shard through the chain, kept and rejected apart."""
    # Documents without an id are named after their shard's file: give it its name here.
    shard = ctx.tmp / ctx.attrs["shard_name"]
    shard.symlink_to(ctx.location("shard"))
    specs = ctx.attrs["filters"]
    if LANGUAGE_MODEL in ctx.inputs:
        specs = [with_model(spec, str(ctx.location(LANGUAGE_MODEL))) for spec in specs]
    chain = FilterChain.from_specs(specs)
    skips = Skips()
    with open(ctx.out / _KEPT, "w", encoding="utf-8") as kept, open(ctx.out / _REJECTED, "w", encoding="utf-8") as out:
        for item in chain.run(read_documents(shard, skips)):
            if isinstance(item, Rejection):
                record = {**item.document.to_json(), "filter": item.filter, "reason": item.reason}
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            else:
                kept.write(json.dumps(item.to_json(), ensure_ascii=False) + "\n")
            if chain.documents % PROGRESS_EVERY == 0:
                ctx.progress(chain.documents, None, "docs")
    ctx.progress(chain.documents, None, "docs")
    # Counts only: a filter's parameters are the driver's (the model's path is this host's).
    counted = [{name: item[name] for name in _COUNTED} for item in chain.to_json()["filters"]]
    counts = {"documents": chain.documents, "kept": chain.kept, "filters": counted}
    scores = [_write_scores(item, index, ctx.out) for index, item in enumerate(chain.counts)]
    (ctx.out / _COUNTS).write_text(json.dumps({"chain": counts, "skipped": skips.to_json(), "scores": scores}))


def _write_scores(counts: FilterCounts, index: int, out: Path) -> dict[str, Any] | None:
    """A threshold filter's scores in this unit: their histogram in a file of its own, and
    their count, extremes and how many the threshold kept, returned; None for another filter."""
    if not isinstance(counts.filter, ThresholdFilter):
        return None
    import numpy as np

    from rules.webdata.blocks.score_distribution import score_histogram

    np.save(out / _SCORES.format(index=index), score_histogram(counts.scores), allow_pickle=False)
    return {**score_range(counts.scores), "kept": counts.scores_kept}


def filter_text(ctx: Context) -> None:
    """The driver: a unit per shard of each split, then the corpus from their outputs.
    Input of which no line is a document (another tool's field names, another encoding)
    fails the step, as extract_text's does, instead of publishing an empty corpus; so does
    a chain that rejects every document of a split (`check_not_emptied`)."""
    root = corpus_root(ctx.files(ctx.attrs["data"]))
    filters = [make_filter(spec).to_json() for spec in language_specs(ctx.attrs["filters"])]  # defaults included
    model = {LANGUAGE_MODEL: _model_file(ctx)} if ctx.attrs[LANGUAGE_MODEL] is not None else {}
    units = [
        ShardUnit(f"{split}/{path.name}", {"shard": path, **model}, {"filters": filters, "shard_name": path.name})
        for split in SPLITS
        for path in sorted((root / split).glob("shard-*.jsonl"))
    ]
    results = ctx.map_shards("rules.webdata.filter_text:filter_shard", units)
    summary = _summary(results, filters)
    if summary["skipped"] and not summary["filters"][0]["seen"]:  # the chain's first filter sees every document
        raise StepFailed(f"no readable line in the {len(units)} shards of {ctx.attrs['data']}: {summary['skipped']}")
    for result in results:
        result.place(_KEPT, ctx.out / result.name)
        result.place(_REJECTED, ctx.out / REJECTED / result.name)
    found = _distributions(results, filters)
    if found:
        summary["distributions"] = [item.to_json() for item in found]
    (ctx.out / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    for item in found:  # before the step may fail for having kept nothing: the reason comes first
        if warning := item.warning():
            ctx.warn(warning)
    check_not_emptied(
        split_counts(results, lambda result: result.read_json(_COUNTS)["chain"]["documents"]),
        summary["documents"],
        "the filters rejected",
        lambda: ", ".join(f"{item['name']} {item['rejected']:,}" for item in summary["filters"] if item["rejected"]),
    )


def _distributions(results: list[ShardResult], specs: list[dict[str, JsonValue]]) -> list[Distribution]:
    """The distribution of the scores of each filter with a threshold, over every unit."""
    import numpy as np

    found = []
    counts = [result.read_json(_COUNTS)["scores"] for result in results]
    for index, spec in enumerate(specs):
        made = make_filter(spec)
        if not isinstance(made, ThresholdFilter):
            continue
        histograms = (np.load(result.path(_SCORES.format(index=index))) for result in results)
        ranges = [unit[index] for unit in counts]
        kept = sum(unit["kept"] for unit in ranges)
        scored = distribution(made.score_name, histograms, ranges, made.threshold, kept)
        if scored is not None:
            found.append(scored)
    return found


def _summary(results: list[ShardResult], specs: list[dict[str, JsonValue]]) -> dict[str, Any]:
    """The counts of every unit, added up: documents kept per split, and per filter (each
    with its parameters, `specs`)."""
    documents: Counter[str] = Counter()
    shards: Counter[str] = Counter()
    filters: list[dict[str, Any]] = [{**spec, "seen": 0, "kept": 0, "rejected": 0, "reasons": {}} for spec in specs]
    skipped: dict[str, dict[str, Any]] = {}
    for result in results:
        split = Path(result.name).parent.name
        counts = result.read_json(_COUNTS)
        documents[split] += counts["chain"]["kept"]
        shards[split] += 1
        for index, seen in enumerate(counts["chain"]["filters"]):
            total = filters[index]
            for name in ("seen", "kept", "rejected"):
                total[name] += seen[name]
            for reason, count in seen["reasons"].items():
                total["reasons"][reason] = total["reasons"].get(reason, 0) + count
        for reason, skip in counts["skipped"].items():
            where = f"{Path(result.name).parent.name}/{skip['first']}"
            known = skipped.setdefault(reason, {"count": 0, "first": where})
            known["count"] += skip["count"]
    return {
        "documents": {split: documents[split] for split in SPLITS},
        "shards": {split: shards[split] for split in SPLITS},
        "filters": filters,
        "skipped": skipped,
    }
