"""A run's lineage: its own identity attributes and every target upstream of it, walked up
through the entries of what it read, from the store alone; and the names its columns go by.

Two trainings of one recipe on data cut at two quality thresholds differ only in a step two
before their tokens, so `compare` looks at everything upstream. A target upstream of every
run is matched by its label; the others (a sweep's own chain per run, `scored_05`,
`scored_07`) by how the run reaches them, and named by what their labels share
(`ablation:scored_*`). Labels inside attribute values are marked (`Label`) so that they are
followed, and shown by the name of their columns.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marinbuild.store import ActionCache, CacheEntry
from marinbuild.targets.rule import COMMON_ATTRS, Rule, checkpoint_name

# Reads the entry of a key (None if the store has no usable one); `entry_reader` caches it.
ReadEntry = Callable[[str], "CacheEntry | None"]


# -- what a run is made of ------------------------------------------------------------------


class Label(str):
    """A string of an attribute that names a target: shown by the name of its columns, and a
    key of a dict (mixture weights) flattened in brackets, `data[datamix:docs_tokens]`."""


def flatten(prefix: str, value: Any) -> Iterable[tuple[str, Any]]:
    """Nested attribute values as `model.hidden_dim = 64` leaves; a list of dicts (a filter
    chain) by position, `filters[1].min_words`; other lists whole, as JSON."""
    if isinstance(value, dict):
        for name, inner in value.items():
            if isinstance(name, Label):
                yield from flatten(f"{prefix}[{name}]", inner)
            else:
                yield from flatten(f"{prefix}.{name}" if prefix else str(name), inner)
    elif isinstance(value, list) and value and all(isinstance(inner, dict) for inner in value):
        for index, inner in enumerate(value):
            yield from flatten(f"{prefix}[{index}]", inner)
    elif isinstance(value, (str, int, float, bool)) or value is None:
        yield prefix, str(value) if isinstance(value, Label) else value
    else:
        yield prefix, json.dumps(value)


def _identity_attrs(rule: Rule | None, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes that make the key (those of the rule that are identity); without the
    rule (no longer in the workspace), every attribute but the common ones."""
    if rule is None:
        return {name: value for name, value in attrs.items() if name not in COMMON_ATTRS}
    return {name: value for name, value in attrs.items() if name in rule.attrs and rule.attrs[name].identity}


def _recorded_attrs(entry: CacheEntry) -> Mapping[str, Any]:
    """Every attribute with its labels, as the attempt that made the entry recorded them."""
    return entry.provenance.get("attrs", entry.recipe["attrs"])


def _mark_labels(value: Any, inputs: Mapping[str, Any]) -> Any:
    """`value` with every string naming one of `inputs` (a dict key too) made a `Label`;
    a target read at a step is named in the inputs as that kept state (`checkpoint_name`)."""
    if isinstance(value, dict):
        return {_mark_labels(name, inputs): _mark_labels(inner, inputs) for name, inner in value.items()}
    if isinstance(value, list):
        return [_mark_labels(inner, inputs) for inner in value]
    if isinstance(value, str) and _input_of(value, inputs) is not None:
        return Label(value)
    return value


def _input_of(label: str, inputs: Mapping[str, Any]) -> str | None:
    """Under which name the inputs of an entry record what `label` stood for: the label, or
    for a target read at a step, that kept state's name."""
    if label in inputs:
        return label
    return next(
        (
            name
            for name, record in inputs.items()
            if "checkpoint_of" in record and name == checkpoint_name(label, record.get("step"))
        ),
        None,
    )


def labels_in(value: Any) -> list[Label]:
    """The `Label`s of a marked value, in order, each once."""
    found: list[Label] = []
    if isinstance(value, dict):
        for name, inner in value.items():
            found += labels_in(name) + labels_in(inner)
    elif isinstance(value, list):
        for inner in value:
            found += labels_in(inner)
    elif isinstance(value, Label):
        found.append(value)
    return list(dict.fromkeys(found))


def relabel(value: Any, names: Mapping[str, str]) -> Any:
    """A marked value with each label replaced by the name its columns go by."""
    if isinstance(value, dict):
        return {relabel(name, names): relabel(inner, names) for name, inner in value.items()}
    if isinstance(value, list):
        return [relabel(inner, names) for inner in value]
    if isinstance(value, Label):
        return Label(names.get(value, value))
    return value


# -- lineage: everything upstream of a run, from the store -------------------------------------


@dataclass(frozen=True)
class Upstream:
    """A target a run's output was made from, directly or not, as the entries record it."""

    label: str
    path: tuple[str, ...]  # how the run reaches it first: `attribute[position]` at each step
    what: str  # its rule; for a source file, its content digest; or why it is unknown
    attrs: dict[str, Any]  # its identity attributes, labels marked (empty for a source file)


@dataclass(frozen=True)
class Lineage:
    """A run's own attributes and every target upstream of it, nearest first."""

    attrs: dict[str, Any]  # the run's identity attributes, labels marked
    upstream: dict[str, Upstream]
    gone: tuple[str, ...] = ()  # upstream labels whose entries the store no longer holds


def entry_reader(cache: ActionCache) -> ReadEntry:
    """Reads entries, each once: the runs of a sweep share most of their lineage."""

    @functools.cache
    def read(key: str) -> CacheEntry | None:
        entry = cache.read_entry(key)
        return entry if isinstance(entry, CacheEntry) else None

    return read


def lineage(entry: CacheEntry, read: ReadEntry, rules: Mapping[str, Rule]) -> Lineage:
    """Walk the recipe of `entry` up through the entries of its inputs, breadth first: each
    target by the first path that reaches it."""

    def marked(found: CacheEntry) -> dict[str, Any]:
        inputs = found.provenance.get("inputs", {})
        attrs = _identity_attrs(rules.get(found.recipe["rule"]), _recorded_attrs(found))
        return {name: _mark_labels(value, inputs) for name, value in attrs.items()}

    own = marked(entry)
    upstream: dict[str, Upstream] = {}
    gone: list[str] = []

    def reach(label: str, record: Mapping[str, Any], where: tuple[str, ...]) -> None:
        if "source" in record:
            upstream[label] = Upstream(label, where, f"file {record['source'][:12]}", {})
            return
        found = read(record.get("checkpoint_of", record.get("key", "")))
        if found is None:
            gone.append(label)
            upstream[label] = Upstream(label, where, "not in the store", {})
            return
        upstream[label] = Upstream(label, where, found.recipe["rule"], marked(found))
        queue.append((found, upstream[label].attrs, where))

    queue: deque[tuple[CacheEntry, dict[str, Any], tuple[str, ...]]] = deque([(entry, own, ())])
    while queue:
        current, attrs, path = queue.popleft()
        inputs = current.provenance.get("inputs", {})
        named: set[str] = set()
        for name, value in attrs.items():
            for position, label in enumerate(labels_in(value)):
                recorded = _input_of(label, inputs)
                named.add(recorded or label)
                if label not in upstream:
                    reach(label, inputs.get(recorded, {}), (*path, f"{name}[{position}]"))
        # What the attributes do not name as such (py_step's file of `fn`): by its place among the inputs.
        others = [name for name in inputs if name not in named and name not in upstream]
        for position, label in enumerate(others):
            reach(label, inputs[label], (*path, f"inputs[{position}]"))
    return Lineage(own, upstream, tuple(gone))


# Where a label's name may be cut for a common name: `docs_scored_05` and `docs_scored_07`
# share `docs_scored_*`, not `docs_scored_0*`.
_SEPARATORS = "_-.:/"


def _short_labels(labels: Iterable[str]) -> dict[str, str]:
    """`//experiments/datamix:docs_scored` as `datamix:docs_scored`, or whole where two
    labels would read alike."""

    def short(label: str) -> str:
        package, _, name = label.removeprefix("//").partition(":")
        return f"{package.rsplit('/', 1)[-1]}:{name}"

    labels = set(labels)
    counts = Counter(short(label) for label in labels)
    return {label: short(label) if counts[short(label)] == 1 else label.removeprefix("//") for label in labels}


def _common_name(names: Sequence[str]) -> str:
    """One name for targets that stand in the same place of different runs' lineages: the
    whole words their names share, the rest a `*` (`ablation:scored_*`)."""
    distinct = sorted(set(names))
    if len(distinct) == 1:
        return distinct[0]
    prefix = _whole_words(os.path.commonprefix(distinct), distinct)
    ends = [name[len(prefix) :][::-1] for name in distinct]
    suffix = _whole_words(os.path.commonprefix(ends), ends)[::-1]
    return f"{prefix}*{suffix}"


def _whole_words(prefix: str, names: Sequence[str]) -> str:
    """`prefix` of every one of `names`, cut back to where a word ends in each of them."""
    while prefix and not (
        prefix[-1] in _SEPARATORS or all(len(name) == len(prefix) or name[len(prefix)] in _SEPARATORS for name in names)
    ):
        prefix = prefix[:-1]
    return prefix


def align(lineages: Sequence[Lineage]) -> list[dict[str, str]]:
    """For each lineage, {upstream label: the name of its columns}. A label upstream of every
    run is its own name; the others are matched by the path that reaches them (a sweep's
    chain per run) and named by what their labels share."""
    if not lineages:
        return []
    shorts = _short_labels(label for found in lineages for label in found.upstream)
    everywhere = set.intersection(*(set(found.upstream) for found in lineages))
    names = [{label: shorts[label] for label in found.upstream if label in everywhere} for found in lineages]
    taken = {shorts[label] for label in everywhere}
    at_path: dict[tuple[str, ...], list[tuple[int, str]]] = {}
    for index, found in enumerate(lineages):
        for label, node in found.upstream.items():
            if label not in everywhere:
                at_path.setdefault(node.path, []).append((index, label))
    for path, members in at_path.items():
        name = _common_name([shorts[label] for _index, label in members])
        if name in taken:  # another place's targets read alike: say where this one is
            name = f"{name} ({'.'.join(path)})"
        taken.add(name)
        for index, label in members:
            names[index][label] = name
    return names
