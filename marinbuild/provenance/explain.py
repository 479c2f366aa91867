"""Why a step would run: its recipe against the nearest earlier entry of the same target.

A key is a digest, so "the key changed" says nothing. The recipe behind it does: each
ingredient (rule and version, every identity attribute however deeply nested, each
source file's content, each dependency's output digest, the store's salt) is compared
with the recipe stored in an earlier entry of the same label, and each difference is
named the way a user thinks of it: `optimizer.learning_rate: 0.0003 → 0.001`,
`dependency //x:tok output changed`, `source data.txt changed`, `rule train_lm version 2 → 3`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marinbuild.actions.analysis.graph import Graph
from marinbuild.actions.analysis.keys import OUTPUT_PREFIX, SOURCE_PREFIX, code_digest, short
from marinbuild.actions.bookkeeping.results import BuildResult, Status
from marinbuild.provenance.attempts import label_attempts
from marinbuild.store import ActionCache, AttemptStatus, CacheEntry
from marinbuild.targets.rule import Target

CODE_CHANGED = "rule code changed since this output was built (bump the rule's version to rebuild)"
_CANDIDATES = 20  # earlier keys of a label compared, newest first


@dataclass(frozen=True)
class Explanation:
    """What `marinbuild explain` reports about one target."""

    label: str
    # "cached", "would-copy" (only in a mirror: a build copies it), "would-run" or
    # "pending" (a dependency must be built first)
    status: str
    key: str | None
    summary: str
    changes: tuple[str, ...] = ()  # against `previous_key`'s recipe
    previous_key: str | None = None
    code_changed: bool = False
    ingredients: tuple[str, ...] = ()
    upstream: tuple[Explanation, ...] = ()  # for a pending target: the dependencies that would run
    # For a resumable step that would run: where it would resume ("the checkpoint at step 10").
    resumes_from: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "status": self.status,
            "key": self.key,
            "summary": self.summary,
            "changes": list(self.changes),
            "previous_key": self.previous_key,
            "code_changed": self.code_changed,
            "ingredients": list(self.ingredients),
            "upstream": [item.to_json() for item in self.upstream],
            "resumes_from": self.resumes_from,
        }


def _token(value: str) -> str | None:
    """A recipe token made readable: `data.txt@1a2b3c4d5e6f`, `output 1a2b3c4d5e6f`."""
    if value.startswith(SOURCE_PREFIX):
        name, _, digest = value.removeprefix(SOURCE_PREFIX).rpartition("@")
        return f"{name}@{short(digest)}"
    if value.startswith(OUTPUT_PREFIX):
        return f"output {short(value.removeprefix(OUTPUT_PREFIX))}"
    return None


def _show(value: Any, raw: Any = None) -> str:
    """A recipe value as a person reads it: labels where they are known, short digests."""
    if isinstance(value, str) and (token := _token(value)) is not None:
        return f"{raw} ({token})" if isinstance(raw, str) and raw != value else token
    if isinstance(value, list):
        raws = raw if isinstance(raw, list) and len(raw) == len(value) else [None] * len(value)
        return "[" + ", ".join(_show(item, item_raw) for item, item_raw in zip(value, raws)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_show(k)}: {_show(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def _leaf_change(path: str, before: Any, after: Any, raw: Any) -> str:
    if isinstance(before, str) and isinstance(after, str):
        if before.startswith(OUTPUT_PREFIX) and after.startswith(OUTPUT_PREFIX):
            return f"dependency {raw if isinstance(raw, str) else path} output changed"
        if before.startswith(SOURCE_PREFIX) and after.startswith(SOURCE_PREFIX):
            name_before = before.removeprefix(SOURCE_PREFIX).rpartition("@")[0]
            name_after = after.removeprefix(SOURCE_PREFIX).rpartition("@")[0]
            if name_before == name_after:
                return f"source {name_after} changed"
    return f"{path}: {_show(before)} → {_show(after, raw)}"


def _diff(path: str, before: Any, after: Any, raw: Any, changes: list[str]) -> None:
    if before == after:
        return
    if isinstance(before, dict) and isinstance(after, dict):
        raws = raw if isinstance(raw, dict) else {}
        for name in sorted(set(before) | set(after), key=str):
            inner = f"{path}.{name}" if path else str(name)
            if name not in before:
                changes.append(f"{inner}: added {_show(after[name], raws.get(name))}")
            elif name not in after:
                changes.append(f"{inner}: removed {_show(before[name])}")
            else:
                _diff(inner, before[name], after[name], raws.get(name), changes)
        return
    if isinstance(before, list) and isinstance(after, list):
        raws = raw if isinstance(raw, list) and len(raw) == len(after) else [None] * len(after)
        if len(before) == len(after):
            for index, (old, new, item_raw) in enumerate(zip(before, after, raws)):
                _diff(f"{path}[{index}]", old, new, item_raw, changes)
            return
        removed = [_show(item) for item in before if item not in after]
        added = [_show(item, item_raw) for item, item_raw in zip(after, raws) if item not in before]
        changes.append(
            f"{path}: "
            + "; ".join(
                filter(
                    None,
                    [f"added {', '.join(added)}" if added else "", f"removed {', '.join(removed)}" if removed else ""],
                )
            )
            if added or removed
            else f"{path}: reordered"
        )
        return
    changes.append(_leaf_change(path, before, after, raw))


def recipe_changes(before: dict[str, Any], after: dict[str, Any], target: Target) -> list[str]:
    """Every ingredient that differs between two recipes of `target`, named for a person."""
    changes: list[str] = []
    if before.get("rule") != after.get("rule"):
        changes.append(f"rule {before.get('rule')} → {after.get('rule')}")
    elif before.get("version") != after.get("version"):
        changes.append(f"rule {after.get('rule')} version {before.get('version')} → {after.get('version')}")
    if before.get("format") != after.get("format"):
        changes.append(f"key format {before.get('format')} → {after.get('format')} (a new marinbuild)")
    if before.get("salt") != after.get("salt"):
        changes.append(f"store salt {before.get('salt')!r} → {after.get('salt')!r}")
    if before.get("external") != after.get("external"):
        changes.append("external inputs changed (files outside the workspace the rule reads)")
    if before.get("code") != after.get("code"):
        changes.append(
            "rule code changed (--strict-code)"
            if "code" in before and "code" in after
            else "rule code is part of the key with --strict-code, and the earlier entry was built "
            + ("without" if "code" in after else "with")
            + " it"
        )
    raw = {name: target.attrs[name] for name in after.get("attrs", {}) if name in target.attrs}
    _diff("", before.get("attrs", {}), after.get("attrs", {}), raw, changes)
    return changes


def ingredients(recipe: dict[str, Any], target: Target) -> list[str]:
    """The key's ingredients, one line each: rule and version, then every attribute leaf."""
    lines = [f"rule {recipe['rule']} version {recipe['version']}", f"store salt {recipe.get('salt', '')!r}"]
    if "external" in recipe:
        lines.append(f"external inputs {short(recipe['external'])}")
    if "code" in recipe:
        lines.append(f"rule code {short(recipe['code'])}")

    def walk(path: str, value: Any, raw: Any) -> None:
        if isinstance(value, dict) and value:
            raws = raw if isinstance(raw, dict) else {}
            for name, inner in value.items():
                walk(f"{path}.{name}" if path else str(name), inner, raws.get(name))
        elif isinstance(value, list) and value and any(isinstance(item, (dict, list)) for item in value):
            raws = raw if isinstance(raw, list) and len(raw) == len(value) else [None] * len(value)
            for index, (inner, inner_raw) in enumerate(zip(value, raws)):
                walk(f"{path}[{index}]", inner, inner_raw)
        else:
            lines.append(f"{path} = {_show(value, raw)}")

    for name, value in recipe.get("attrs", {}).items():
        walk(name, value, target.attrs.get(name))
    return lines


def nearest_entry(cache: ActionCache, target: Target, recipe: dict[str, Any]) -> tuple[CacheEntry, list[str]] | None:
    """The earlier entry of the same label whose recipe differs least from `recipe`, with the
    differences (the newest wins a tie); None if the label was never built into this store."""
    keys: list[str] = []
    for record in reversed(label_attempts(cache.store, str(target.label))):
        if record.status is AttemptStatus.SUCCEEDED and record.key not in keys:
            keys.append(record.key)
    best: tuple[CacheEntry, list[str]] | None = None
    for key in keys[:_CANDIDATES]:
        entry = cache.read_entry(key)
        if isinstance(entry, str):
            continue
        changes = recipe_changes(entry.recipe, recipe, target)
        if best is None or len(changes) < len(best[1]):
            best = (entry, changes)
    return best


def explain_miss(cache: ActionCache, target: Target, recipe: dict[str, Any]) -> str:
    """One line: why a target whose key has no entry would run."""
    found = nearest_entry(cache, target, recipe)
    if found is None:
        return "never built into this store"
    entry, changes = found
    if not changes:
        return f"same recipe as {short(entry.key)}, whose entry is gone or unusable"
    return "; ".join(changes)


def explain_target(
    cache: ActionCache,
    graph: Graph,
    planned: BuildResult,
    recipe_of: Callable[[str], dict[str, Any] | None],
    label: str,
) -> Explanation:
    """Explain `label` from a dry run over a graph holding it: its results (`planned`) and
    the recipe of each target whose key it could compute (`recipe_of`: None for the others)."""
    result = planned.results[label]
    target = graph.targets[label]
    recipe = recipe_of(label)
    listed = tuple(ingredients(recipe, target)) if recipe is not None else ()
    if result.status is Status.CACHED:
        entry = cache.read_entry(result.key) if result.key else None
        built = f", {_built_by(entry)}" if isinstance(entry, CacheEntry) else ""
        summary = f"cached: would not run (key {short(result.key or '')}{built})"
        if result.code_changed:
            summary += f"; warning: {CODE_CHANGED}"
        return Explanation(label, "cached", result.key, summary, code_changed=result.code_changed, ingredients=listed)
    hit = cache.mirrors.hit(result.key) if result.status is Status.WOULD_COPY and cache.mirrors and result.key else None
    if hit is not None:
        summary = f"would be copied, not run: {hit.elsewhere()} (key {short(hit.key)}, {_built_by(hit.entry)})"
        return Explanation(label, "would-copy", result.key, summary, ingredients=listed)
    if result.status is Status.WOULD_RUN and recipe is not None:
        found = nearest_entry(cache, target, recipe)
        if found is None:
            return Explanation(
                label, "would-run", result.key, "would run: never built into this store", ingredients=listed
            )
        entry, changes = found
        code_changed = entry.provenance.get("rule_code") not in (None, code_digest(target.rule, cache.stat_cache))
        summary = (
            f"would run: its key differs from {short(entry.key)}, built at {entry.provenance.get('finished', '?')}"
        )
        if not changes:
            summary = f"would run: same recipe as {short(entry.key)}, whose entry is gone or unusable"
        if code_changed:
            changes = [*changes, f"also: rule code changed since {short(entry.key)} was built"]
        return Explanation(label, "would-run", result.key, summary, tuple(changes), entry.key, code_changed, listed)
    upstream = [
        explain_target(cache, graph, planned, recipe_of, dependency)
        for dependency in _ancestors(graph.deps, label)
        if planned.results.get(dependency) is not None and planned.results[dependency].status is Status.WOULD_RUN
    ]
    names = ", ".join(item.label for item in upstream) or "a dependency"
    return Explanation(
        label, "pending", None, f"would run after {names}: its key needs their outputs", upstream=tuple(upstream)
    )


def _built_by(entry: CacheEntry) -> str:
    where = entry.provenance
    return f"built by {where.get('user', '?')}@{where.get('host', '?')} at {where.get('finished', '?')}"


def _ancestors(deps: Mapping[str, Sequence[str]], label: str) -> list[str]:
    seen: dict[str, None] = {}
    stack = list(deps.get(label, ()))
    while stack:
        current = stack.pop()
        if current not in seen:
            seen[current] = None
            stack.extend(deps.get(current, ()))
    return list(seen)
