"""What tells runs apart, for a table of them: the hyperparameters (identity attributes that
name no target) and the attributes anywhere upstream (the run's data and their weights, every
identity attribute of every target in its lineage, and which targets there are) whose values
differ between the runs that have them. `compare` and the report's runs table show these.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marinbuild.provenance.lineage import Lineage, ReadEntry, align, flatten, labels_in, lineage, relabel
from marinbuild.store import CacheEntry
from marinbuild.targets.rule import Rule

# The group of the columns that say which targets a lineage holds: present in every run.
_TARGETS = ""


@dataclass(frozen=True)
class Differences:
    """What tells runs apart, for a table of them: per run, the hyperparameters (identity
    attributes naming no target) and the upstream attributes (the run's data and their
    weights, every identity attribute of every target upstream, and which targets there are)
    whose values differ between the runs that have them. A value is compared within its
    group, a top-level attribute of the run or of a target upstream: a run whose rule has no
    such attribute, or whose lineage no such target, takes no part (its cell is empty)."""

    columns: tuple[str, ...]  # hyperparameters first, then upstream
    rows: list[dict[str, Any]]  # per run, {column: value}
    shared: dict[str, Any]  # hyperparameters alike in every run that has them
    shared_upstream: dict[str, Any]  # upstream attributes alike in every run that has them
    upstream_targets: int
    notes: tuple[str, ...]  # lineages cut short


def _compare_groups(
    found: Sequence[Mapping[str, Mapping[str, Any]]],
) -> tuple[list[str], list[dict[str, Any]], dict[str, Any]]:
    """(the columns whose values differ, per run {column: value} of those, {column: value}
    of the others) over per-run {group: {column: value}}: a column is compared among the
    runs that have its group, one of them without a value there holding None."""
    group_of: dict[str, str] = {}
    for groups in found:
        for group, values in groups.items():
            for column in values:
                group_of.setdefault(column, group)
    differing, shared = [], {}
    for column, group in group_of.items():
        having = [groups[group].get(column) for groups in found if group in groups]
        if len({json.dumps(value, sort_keys=True) for value in having}) > 1:
            differing.append(column)
        else:
            shared[column] = having[0]
    rows = [{column: groups.get(group_of[column], {}).get(column) for column in differing} for groups in found]
    return differing, rows, shared


def _upstream_groups(found: Lineage, named: Mapping[str, str], labelled: set[str]) -> dict[str, dict[str, Any]]:
    """A lineage's upstream columns by group: the run's attributes that name targets (its
    data, with their weights), which targets there are, and each one's attributes."""
    own = {name: relabel(value, named) for name, value in found.attrs.items() if name in labelled}
    groups = {name: dict(flatten(name, value)) for name, value in own.items()}
    groups[_TARGETS] = {named[label]: node.what for label, node in found.upstream.items()}
    for label, node in found.upstream.items():
        for attr, value in node.attrs.items():
            where = f"{named[label]}.{attr}"
            groups[where] = dict(flatten(where, relabel(value, named)))
    return groups


def side_by_side(entries: Sequence[CacheEntry], read: ReadEntry, rules: Mapping[str, Rule]) -> Differences:
    """The differences between the runs whose entries are `entries`, in their own recipes
    and in their lineages (each entry read once, whichever runs share it)."""
    lineages = [lineage(entry, read, rules) for entry in entries]
    names = align(lineages)
    # An attribute naming a target in any run (`data`, `init_from`) is of the lineage in every run.
    labelled = {name for found in lineages for name, value in found.attrs.items() if labels_in(value)}
    params = [
        {name: dict(flatten(name, value)) for name, value in found.attrs.items() if name not in labelled}
        for found in lineages
    ]
    upstream = [_upstream_groups(found, named, labelled) for found, named in zip(lineages, names)]
    param_columns, param_rows, shared = _compare_groups(params)
    upstream_columns, upstream_rows, alike = _compare_groups(upstream)
    targets = {name for named in names for name in named.values()}
    notes = tuple(
        f"the lineage of {entry.label} ({entry.key[:12]}) stops at {', '.join(found.gone)}: no longer in the store"
        for entry, found in zip(entries, lineages)
        if found.gone
    )
    return Differences(
        (*param_columns, *upstream_columns),
        [{**own, **other} for own, other in zip(param_rows, upstream_rows)],
        shared,
        {column: value for column, value in alike.items() if column not in targets},
        len(targets),
        notes,
    )
