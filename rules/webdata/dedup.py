"""`dedup`'s step: exact, near-duplicate and paragraph dedup across every shard of its inputs.

A sharded rule (docs/rules.md#sharded-steps) in the three phases of blocks/dedup/:

1. a *map* unit per input shard, keyed by the shard's content and the dedup config only
   (not its name nor its input), writing the shard's signatures: adding a shard maps that
   shard alone, and a shard two inputs share is mapped once;
2. the *reduce*, over every shard's signatures in the stable order (the inputs in the
   order given, then the splits, then the shards by name), writing one decision file per
   shard: in the driver (`find_clusters`) for up to `reduce_documents` documents, and for
   more in waves of units of about that many each (`PartitionedReduce`), on the local pool
   or as Ray tasks, with the same decisions;
3. an *apply* unit per shard, keyed by the shard's content and its decision file's
   content: it writes the kept documents and the shard's cluster members. A shard whose
   decisions did not change (no document of it joined or left a cluster, no cluster it is
   in changed its first member) is not applied again.

The output is a corpus in the layout of every data rule (`train/`, `validation/`,
`summary.json`, the shards numbered again across the inputs), with every cluster member,
kept or removed, under `clusters/` for a researcher to inspect, and `summary.json`
counting the documents removed as exact and near duplicates and the paragraphs removed.

The blocks of each phase (blocks/dedup/, numpy) are imported by the functions that run it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marinbuild.targets import ShardResult, ShardUnit
from marinbuild.targets.context import Context
from rules.common.corpus import SPLITS, SUMMARY, check_not_emptied, corpus_root, split_counts
from rules.webdata.blocks.dedup.config import DedupConfig
from rules.webdata.blocks.documents import Skips, read_documents
from rules.webdata.constants import CLUSTERS

_KEPT, _MEMBERS, _COUNTS = "kept.jsonl", "clusters.jsonl", "counts.json"  # an apply unit's outputs
_REDUCE_UNIT = "rules.webdata.dedup:reduce_unit"


def _shard(ctx: Context) -> Path:
    """The unit's shard under its original file name (documents without an id are named after it)."""
    shard = ctx.tmp / ctx.attrs["shard_name"]
    shard.symlink_to(ctx.location("shard"))
    return shard


def map_unit(ctx: Context) -> None:
    """Phase 1, one unit: the signatures of one shard's documents."""
    from rules.webdata.blocks.dedup.signatures import map_shard

    skips = Skips()
    config = DedupConfig.from_spec(**ctx.attrs["config"])
    documents = map_shard(read_documents(ctx.location("shard"), skips), config, ctx.out)
    ctx.progress(documents, None, "docs")


def apply_unit(ctx: Context) -> None:
    """Phase 3, one unit: one shard's kept documents and cluster members, by its decisions."""
    from rules.webdata.blocks.dedup.apply import ClusterMember, Deduplication
    from rules.webdata.blocks.dedup.clusters import ShardDecisions

    marks = ctx.location("paragraphs") if "paragraphs" in ctx.inputs else None
    deduplication = Deduplication(ShardDecisions(ctx.location("clusters"), marks))
    skips = Skips()
    with open(ctx.out / _KEPT, "w", encoding="utf-8") as kept, open(ctx.out / _MEMBERS, "w", encoding="utf-8") as out:
        for item in deduplication.run(read_documents(_shard(ctx), skips)):
            target = out if isinstance(item, ClusterMember) else kept
            target.write(json.dumps(item.to_json(), ensure_ascii=False) + "\n")
    ctx.progress(deduplication.documents, None, "docs")
    (ctx.out / _COUNTS).write_text(json.dumps({"dedup": deduplication.to_json(), "skipped": skips.to_json()}))


def reduce_unit(ctx: Context) -> None:
    """Phase 2 in units (blocks/dedup/partitioned.py): one unit of one wave."""
    from rules.webdata.blocks.dedup.partitioned import WAVES

    WAVES[ctx.attrs["wave"]]({role: ctx.location(role) for role in ctx.inputs}, ctx.attrs, ctx.out)


def dedup(ctx: Context) -> None:
    """The driver: map every shard, find the clusters, apply them shard by shard."""
    from rules.webdata.blocks.dedup.clusters import find_clusters, npy_header
    from rules.webdata.blocks.dedup.partitioned import PartitionedReduce
    from rules.webdata.blocks.dedup.signatures import CONTENT

    config = DedupConfig.from_spec(ctx.attrs["exact"], ctx.attrs["fuzzy"], ctx.attrs["paragraphs"])
    shards: list[tuple[str, Path]] = []  # (output name, input shard) in the stable order
    for split in SPLITS:
        numbered = 0
        for label in ctx.attrs["data"]:
            for path in sorted((corpus_root(ctx.files(label)) / split).glob("shard-*.jsonl")):
                shards.append((f"{split}/shard-{numbered:05d}.jsonl", path))
                numbered += 1
    maps = ctx.map_shards(
        "rules.webdata.dedup:map_unit",
        [ShardUnit(name, {"shard": path}, {"config": config.to_json()}) for name, path in shards],
    )
    roots = [result.root for result in maps]
    most = int(ctx.attrs["reduce_documents"])
    if sum(npy_header(root / CONTENT)[0][0] for root in roots) <= most:
        clusters = find_clusters(roots, config, ctx.tmp / "decisions")
    else:
        waves = PartitionedReduce(roots, config, most, lambda _, units: ctx.map_shards(_REDUCE_UNIT, units))
        clusters = waves.run(ctx.tmp / "decisions")
    units = []
    for (name, path), decisions in zip(shards, clusters.shards):
        files = {"shard": path, "clusters": decisions.clusters}
        if decisions.paragraphs is not None:
            files["paragraphs"] = decisions.paragraphs
        units.append(ShardUnit(name, files, {"shard_name": path.name}))
    results = ctx.map_shards("rules.webdata.dedup:apply_unit", units)
    for result in results:
        result.place(_KEPT, ctx.out / result.name)
        result.place(_MEMBERS, ctx.out / CLUSTERS / result.name)
    summary = {**_summary(results), "config": config.to_json(), "clusters": clusters.counts.to_json()}
    (ctx.out / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    check_not_emptied(
        split_counts(results, lambda result: result.read_json(_COUNTS)["dedup"]["documents"]),
        summary["documents"],
        "dedup removed",
        lambda: _removed(summary["removed"]),
    )


def _removed(removed: Mapping[str, int]) -> str:
    """What dedup removed, in words: "exact duplicates 3, near duplicates 2"."""
    named = {"exact": "exact duplicates", "near": "near duplicates", "emptied": "left without a paragraph"}
    return ", ".join(f"{words} {removed[name]:,}" for name, words in named.items() if removed[name])


def _summary(results: list[ShardResult]) -> dict[str, Any]:
    """The counts of every apply unit, added up: documents kept per split, and removed by reason."""
    documents: Counter[str] = Counter()
    shards: Counter[str] = Counter()
    removed: Counter[str] = Counter()
    skipped: dict[str, dict[str, Any]] = {}
    for result in results:
        split = Path(result.name).parent.name
        counts = result.read_json(_COUNTS)
        documents[split] += counts["dedup"]["kept"]
        shards[split] += 1
        removed.update(counts["dedup"]["removed"])
        removed.update(paragraph=counts["dedup"]["paragraphs_removed"], emptied=counts["dedup"]["emptied"])
        for reason, skip in counts["skipped"].items():
            known = skipped.setdefault(reason, {"count": 0, "first": f"{split}/{skip['first']}"})
            known["count"] += skip["count"]
    return {
        "documents": {split: documents[split] for split in SPLITS},
        "shards": {split: shards[split] for split in SPLITS},
        "removed": {
            "exact": removed["exact duplicate"],
            "near": removed["near duplicate"],
            "paragraphs": removed["paragraph"],
            "emptied": removed["emptied"],
        },
        "skipped": skipped,
    }
