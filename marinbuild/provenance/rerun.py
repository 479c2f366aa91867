"""Rerun a recipe from its key, from the store alone.

Every entry (and every attempt record) keeps what a rebuild needs: the rule's registered
name and version, every attribute with its labels, and what each label stood for — a
dependency by the key that produced it, a source file by the digest of its content,
kept in the store as a blob. So the graph that made an output can be rebuilt from its
key when the BUILD files have changed or are gone: rules come from the workspace's rule
modules, sources from blobs, dependencies from their own recipes, recursively (a state
another step kept, read at a step, from the recipe of the step that kept it).

`check` runs a recipe again even though it is cached, into a side location, and
compares: byte for byte, or, for a rule that declares `check_metrics` (training), its
metrics within the rule's tolerances.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.actions.analysis.graph import Checkpoint, Graph, SourceFile
from marinbuild.actions.analysis.keys import short
from marinbuild.errors import Location, StoreError
from marinbuild.labels import parse_label
from marinbuild.provenance.attempts import key_attempts
from marinbuild.provenance.metrics import directory_metrics
from marinbuild.store import ActionCache, CacheEntry
from marinbuild.store.manifest import FileEntry, Manifest, hash_tree
from marinbuild.targets.rule import Rule, Target, checkpoint_dir


@dataclass(frozen=True)
class StoredRecipe:
    """What the store says made a key: from its entry, or failing that an attempt record."""

    key: str
    label: str
    rule: str
    version: int
    attrs: dict[str, Any]
    inputs: dict[str, dict[str, str]]
    strict_code: bool  # the key was made with the rule's source in it (--strict-code)
    entry: CacheEntry | None


def stored_recipe(cache: ActionCache, key: str) -> StoredRecipe:
    entry = cache.read_entry(key)
    if isinstance(entry, CacheEntry):
        record, recipe = entry.provenance, entry.recipe
    else:
        attempts = [item for item in key_attempts(cache.store, key) if "inputs" in item.record]
        if not attempts:
            raise StoreError(
                f"the store {cache.store.url} holds no recipe for key {key}",
                hint="'marinbuild history' lists what was built",
            )
        record = attempts[-1].record
        recipe = {"rule": record["rule"], "version": record["rule_version"]}
    if "shard_of" in record:  # a unit of a sharded step (actions/execution/shards.py) runs with its step
        step = record["shard_of"]
        raise StoreError(
            f"{short(key)} is the unit {record['shard']} of the sharded step {step['label']}, and reruns with it",
            hint=f"rerun the step: marinbuild rerun {step['key']}",
        )
    if "inputs" not in record or "attrs" not in record:
        raise StoreError(
            f"the recipe of {short(key)} was recorded by an older marinbuild, without its inputs: it cannot be rerun"
        )
    return StoredRecipe(
        key,
        record["label"],
        recipe["rule"],
        recipe["version"],
        record["attrs"],
        record["inputs"],
        "code" in recipe,
        entry if isinstance(entry, CacheEntry) else None,
    )


def find_key(cache: ActionCache, text: str) -> str:
    """A full key from a full one or a unique prefix of at least 8 hex digits."""
    text = text.lower()
    if len(text) < 8 or any(char not in "0123456789abcdef" for char in text):
        raise StoreError(
            f"'{text}' is not a key", hint="keys are hex; 'marinbuild history' and 'marinbuild show LABEL' print them"
        )
    if len(text) == 64:
        return text
    matches = cache.keys_with_prefix(text)
    if len(matches) != 1:
        raise StoreError(
            f"{len(matches)} keys in {cache.store.url} start with {text}", hint="give more digits of the key"
        )
    return matches[0]


def recipe_graph(cache: ActionCache, rules: Mapping[str, Rule], key: str, sources: Path) -> Graph:
    """The graph that made `key`, from the store: its targets rebuilt from stored recipes,
    its source files written under `sources` from their blobs."""
    top = stored_recipe(cache, key)
    graph = Graph(requested=[top.label])
    keys_by_label: dict[str, str] = {}

    def add(recipe: StoredRecipe) -> None:
        if recipe.label in keys_by_label:
            if keys_by_label[recipe.label] != recipe.key:
                raise StoreError(f"{recipe.label} appears under two keys in the recipe of {short(key)}")
            return
        keys_by_label[recipe.label] = recipe.key
        rule = rules.get(recipe.rule)
        if rule is None:
            raise StoreError(
                f"rule {recipe.rule} (of {recipe.label}) is not registered in this workspace",
                hint="rules come from the built-ins and the modules named in [tool.marinbuild] rules",
            )
        if rule.version != recipe.version:
            raise StoreError(
                f"rule {recipe.rule} is at version {rule.version} here; "
                f"the recipe of {recipe.label} needs version {recipe.version}"
            )
        label = parse_label(recipe.label)
        for name, record in recipe.inputs.items():
            if "source" in record:
                source = parse_label(name)
                path = sources / source.package / source.name
                if not cache.get_blob(record["source"], path):
                    raise StoreError(f"source {name} ({short(record['source'])}) of {recipe.label} is not in the store")
                graph.sources[name] = SourceFile(source, path)
            elif "checkpoint_of" in record:  # a state another step kept: rebuilt with that step
                of = stored_recipe(cache, record["checkpoint_of"])
                add(of)
                graph.checkpoints[name] = Checkpoint(of.label, record["step"])
                graph.deps[name] = [of.label]
            else:
                add(stored_recipe(cache, record["key"]))
        location = Location(f"(the recipe of {short(recipe.key)} in {cache.store.url})", 0)
        # An attribute the rule gained since the recipe was recorded (train_lm's `tracker`)
        # takes its default, as in a BUILD file that leaves it out.
        added = {
            name: attr.default
            for name, attr in rule.all_attrs.items()
            if name not in recipe.attrs and not attr.mandatory
        }
        attrs = {**added, **recipe.attrs}
        graph.targets[recipe.label] = Target(label, rule, attrs, location)
        graph.deps[recipe.label] = list(recipe.inputs)
        graph.order.append(recipe.label)  # after its dependencies

    add(top)
    return graph


@dataclass
class CheckReport:
    """The result of running a cached recipe again: where, and what differs."""

    key: str
    label: str
    side: Path
    compared: str  # "bytes" or "metrics"
    differences: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.differences


def compare_bytes(recorded: Manifest, rerun: Manifest) -> list[str]:
    before = {item.path: item for item in recorded.files}
    after = {item.path: item for item in rerun.files}
    differences = [f"{path}: missing from the rerun" for path in sorted(set(before) - set(after))]
    differences += [f"{path}: only in the rerun" for path in sorted(set(after) - set(before))]
    differences += [
        f"{path}: {before[path].size} bytes {short(before[path].digest)} → "
        f"{after[path].size} bytes {short(after[path].digest)}"
        for path in sorted(set(before) & set(after))
        if before[path].digest != after[path].digest
    ]
    return differences


def compare_metrics(
    recorded: Mapping[str, Any], rerun: Mapping[str, Any], tolerances: Mapping[str, float]
) -> list[str]:
    differences = []
    for name, tolerance in tolerances.items():
        old, new = recorded.get(name), rerun.get(name)
        if isinstance(old, (int, float)) and isinstance(new, (int, float)):
            if not math.isclose(old, new, rel_tol=tolerance, abs_tol=0.0):
                differences.append(f"{name}: {old} → {new} (tolerance {tolerance:g} relative)")
        elif old != new:
            differences.append(f"{name}: {json.dumps(old)} → {json.dumps(new)}")
    return differences


def check_outputs(cache: ActionCache, rule: Rule, key: str, side: Path) -> CheckReport:
    """Compare a rerun's outputs in `side` with those published under `key`."""
    outputs = cache.lookup(key).outputs
    if outputs is None:
        raise StoreError(f"{short(key)} has no usable output to compare with")
    entry = cache.read_entry(key)
    label = entry.label if isinstance(entry, CacheEntry) else "?"
    if rule.check_metrics is None:
        published = _with_kept_states(cache, outputs.manifest, entry)
        return CheckReport(key, label, side, "bytes", compare_bytes(published, hash_tree(side)))
    recorded = directory_metrics(cache.local_dir(outputs), rule)
    return CheckReport(
        key, label, side, "metrics", compare_metrics(recorded, directory_metrics(side, rule), rule.check_metrics)
    )


def _with_kept_states(cache: ActionCache, manifest: Manifest, entry: CacheEntry | str) -> Manifest:
    """What the step wrote into its output: its published files and, under
    `checkpoint_dir(step)`, each state it kept, which lives in its own entry (a run aside
    publishes nothing, so its output still holds them; actions/execution/kept_states.py)."""
    if not isinstance(entry, CacheEntry):
        return manifest
    files = list(manifest.files)
    for step, key in entry.provenance.get("checkpoints", {}).items():
        kept = cache.lookup(key).outputs
        if kept is None:
            raise StoreError(
                f"the checkpoint {short(key)} of {short(entry.key)} at step {step} has no usable entry to compare with"
            )
        prefix = checkpoint_dir(int(step))
        files += [FileEntry(f"{prefix}/{item.path}", item.digest, item.size) for item in kept.manifest.files]
    return Manifest(tuple(files))
