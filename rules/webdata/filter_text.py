"""`filter_text`: a chain of document filters over a corpus, shard by shard.

A sharded rule (docs/rules.md#sharded-steps): each shard of the input corpus is a unit of
its own, keyed by the shard's content, its name (documents without an id are named after
it) and the filters' parameters, so adding a shard filters only that shard and changing a
filter's parameter filters every shard again, and nothing upstream. The output is a
corpus in the layout of every data rule (`train/`, `validation/`, `summary.json`), with
each rejected document beside it under `rejected/`, with the filter that rejected it and
why, and `summary.json` counting what each filter saw, kept and rejected, and the input
lines skipped (not JSON, no text...), by reason.

This is the minimal rule: the language filter, whose fastText model must be an input of
the step (its digest in the key, never a path), is not offered yet.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marinbuild.targets import Attr, Resources, Rule, ShardResult, ShardUnit
from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import AttrError, JsonValue
from marinbuild.targets.context import Context
from rules.corpus_shards import PROGRESS_EVERY, SPLITS, SUMMARY, corpus_root
from rules.webdata.documents import Skips, read_documents
from rules.webdata.filters import FilterChain, Rejection, make_filter

REJECTED = "rejected"
_KEPT, _REJECTED, _COUNTS = "kept.jsonl", "rejected.jsonl", "counts.json"  # a unit's outputs


def _check(attrs: Mapping[str, JsonValue]) -> None:
    """At load: every filter exists and its parameters are valid (an error at the BUILD line)."""
    filters = attrs["filters"]
    if not isinstance(filters, list) or not filters:
        raise AttrError("filters must be a non-empty list of filters, e.g. [{'name': 'gopher_quality'}]")
    for spec in filters:
        if isinstance(spec, Mapping) and spec.get("name") == "language":
            raise AttrError("filter_text does not take the language filter yet: its model must be an input of the step")
        make_filter(spec)


def filter_shard(ctx: Context) -> None:
    """One unit: the documents of one shard through the chain, kept and rejected apart."""
    # Documents without an id are named after their shard's file: give it its name here.
    shard = ctx.tmp / ctx.attrs["shard_name"]
    shard.symlink_to(ctx.location("shard"))
    chain = FilterChain.from_specs(ctx.attrs["filters"])
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
    (ctx.out / _COUNTS).write_text(json.dumps({"chain": chain.to_json(), "skipped": skips.to_json()}))


def _filter_text(ctx: Context) -> None:
    """The driver: a unit per shard of each split, then the corpus from their outputs."""
    root = corpus_root(ctx.files(ctx.attrs["data"]))
    filters = [make_filter(spec).to_json() for spec in ctx.attrs["filters"]]  # defaults included
    units = [
        ShardUnit(f"{split}/{path.name}", {"shard": path}, {"filters": filters, "shard_name": path.name})
        for split in SPLITS
        for path in sorted((root / split).glob("shard-*.jsonl"))
    ]
    results = ctx.map_shards("rules.webdata.filter_text:filter_shard", units)
    for result in results:
        result.place(_KEPT, ctx.out / result.name)
        result.place(_REJECTED, ctx.out / REJECTED / result.name)
    (ctx.out / SUMMARY).write_text(json.dumps(_summary(results), indent=2, sort_keys=True) + "\n")


def _summary(results: list[ShardResult]) -> dict[str, Any]:
    """The counts of every unit, added up: documents kept per split, and per filter."""
    documents: Counter[str] = Counter()
    shards: Counter[str] = Counter()
    filters: list[dict[str, Any]] = []
    skipped: dict[str, dict[str, Any]] = {}
    for result in results:
        split = Path(result.name).parent.name
        counts = result.read_json(_COUNTS)
        documents[split] += counts["chain"]["kept"]
        shards[split] += 1
        for index, seen in enumerate(counts["chain"]["filters"]):
            if index == len(filters):
                filters.append({**seen, "seen": 0, "kept": 0, "rejected": 0, "reasons": {}})
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


filter_text = Rule(
    name="filter_text",
    impl=_filter_text,
    attrs={
        "data": Attr(types.LABEL, doc="A corpus: the output of a data rule (train/, validation/, summary.json)."),
        "filters": Attr(
            types.JSON,
            doc="The chain, in order: [{'name': 'gopher_quality', 'min_words': 50}, {'name': 'c4'}, ...]; "
            "a filter's parameters are checked when the BUILD file loads.",
        ),
    },
    validate=_check,
    resources=Resources(cpu=2),
    sharded=True,
    metrics_file=SUMMARY,
)
