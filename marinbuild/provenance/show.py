"""What made an output: its recipe, inputs, provenance, files and metrics, from its entry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marinbuild.actions.analysis.keys import checkpoint_key
from marinbuild.errors import StoreError
from marinbuild.provenance.metrics import stored_metrics
from marinbuild.store import ActionCache, CacheEntry, layout
from marinbuild.store.mirrors import MirrorHit
from marinbuild.targets.rule import Rule

# Who, where, when, with what: the provenance fields `show` reports, in this order.
PROVENANCE_FIELDS = (
    "user",
    "host",
    "executor",
    "ran_on",
    "started",
    "finished",
    "duration_s",
    "marinbuild",
    "python",
    "platform",
    "packages",
    "git_commit",
    "git_dirty",
    "invocation",
    "attempt",
    "rule_code",
)


def describe(cache: ActionCache, key: str, rules: Mapping[str, Rule], recursive: bool = False) -> dict[str, Any]:
    """Everything the store knows about the output of `key`; with `recursive`, the same for
    the dependencies that made its inputs."""
    entry, hit = find_entry(cache, key)
    record = entry.provenance
    inputs: dict[str, Any] = {}
    for label, item in record.get("inputs", {}).items():
        inputs[label] = dict(item)
        if recursive and "key" in item:
            try:
                inputs[label]["made_by"] = describe(cache, item["key"], rules, recursive)
            except StoreError as error:
                inputs[label]["made_by"] = {"error": str(error)}
    recipe = entry.recipe
    rule = rules.get(recipe["rule"])
    kept = record.get("attrs", {}).get(rule.keeps_checkpoints) if rule and rule.keeps_checkpoints else None
    kept_entries = {str(step): checkpoint_key(key, step) for step in kept or ()}
    # Where each lives: its entry's output (in the mirror, for an entry only there).
    kept_at = {
        step: hit.mirror.location(layout.output(state)) if hit is not None else cache.output_dir(state)
        for step, state in kept_entries.items()
    }
    return {
        "key": entry.key,
        "label": entry.label,
        "tree_digest": entry.tree_digest,
        "recipe": {
            "rule": recipe["rule"],
            "version": recipe["version"],
            "salt": recipe.get("salt", ""),
            **({"external": recipe["external"]} if "external" in recipe else {}),
            **({"code": recipe["code"]} if "code" in recipe else {}),
            "attrs": record.get("attrs", recipe["attrs"]),
            "inputs": inputs,
        },
        "provenance": {name: record[name] for name in PROVENANCE_FIELDS if name in record},
        "outputs": entry.manifest.to_json(),
        "total_bytes": entry.manifest.total_bytes,
        # An entry only in a mirror: its outputs are not read across regions (nor its metrics).
        "metrics": stored_metrics(cache, entry, rule) if hit is None else {},
        # The states it kept, each an entry of its own (`show KEY` describes one), by step.
        **({"checkpoints": kept_entries, "checkpoint_outputs": kept_at} if kept else {}),
        # The units a sharded step mapped (actions/execution/shards.py), each an entry `show KEY` describes.
        **({"shards": record["shards"]} if record.get("shards") else {}),
        # What the build assumed a training would cost (targets/compute.py), beside its duration.
        **({"estimate": record["estimate"]} if "estimate" in record else {}),
        # What the attempt that made the output measured (`ctx.measure`): not part of it.
        "measured": record.get("measured", {}),
        # Where the entry came from if it was copied from a mirror in another region
        # (store/mirrors.py); the provenance above is the original builder's.
        **({"copied": copied} if hit is None and (copied := cache.records.read_copy(key)) is not None else {}),
        # Where it is if it is only in a mirror, and what a build here would copy.
        **({"mirrored": {**hit.to_json(), "summary": hit.elsewhere()}} if hit is not None else {}),
    }


def find_entry(cache: ActionCache, key: str) -> tuple[CacheEntry, MirrorHit | None]:
    """The entry of `key` in the store; if the store has none, the one a mirror holds, as
    verified as a build's copy would be (store/mirrors.py), and read only: nothing is copied."""
    entry = cache.read_entry(key)
    if isinstance(entry, CacheEntry):
        return entry, None
    if cache.mirrors is not None and cache.store.signature(layout.entry(key)) is None:
        hit = cache.mirrors.hit(key)
        if hit is not None:
            return hit.entry, hit
    raise StoreError(f"no usable entry for key {key}: {entry}")
