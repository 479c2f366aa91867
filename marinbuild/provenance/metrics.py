"""A step's numbers, read back as its rule declares them (targets/outputs.py): its summary
metrics (`Rule.metrics_file`), and an evaluation's numbers named by what it evaluated
(`Rule.evaluated`). `show`, `compare`, `rerun --check` and the report all read them here,
so none of them knows a rule's file names or fields.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from marinbuild.errors import StoreError
from marinbuild.store import ActionCache, CacheEntry
from marinbuild.store.manifest import FileEntry
from marinbuild.targets.rule import Rule


def stored_metrics(cache: ActionCache, entry: CacheEntry, rule: Rule | None) -> dict[str, Any]:
    """The summary metrics of a published output, checked against its manifest; {} for a step
    whose rule declares none. A file that does not match its digest is an error."""
    listed = _metrics_entry(entry, rule)
    if listed is None:
        return {}
    data = cache.read_output(entry.key, listed)
    if data is None:
        raise StoreError(f"{listed.path} of {entry.key[:12]} is missing or does not match its manifest")
    return json.loads(data)


def readable_metrics(cache: ActionCache, entry: CacheEntry, rule: Rule | None) -> Any | None:
    """The summary metrics of a published output as `stored_metrics`, but None where they are
    missing, unreadable or not their own: for a table of many outputs, which one bad file
    must not stop."""
    listed = _metrics_entry(entry, rule)
    data = cache.read_output(entry.key, listed) if listed is not None else None
    try:
        return json.loads(data) if data is not None else None
    except ValueError:
        return None


def _metrics_entry(entry: CacheEntry, rule: Rule | None) -> FileEntry | None:
    """The manifest's entry of the metrics file the rule declares, if it has one and the
    output holds it."""
    if rule is None or rule.metrics_file is None:
        return None
    return next((item for item in entry.manifest.files if item.path == rule.metrics_file), None)


def directory_metrics(directory: Path, rule: Rule) -> dict[str, Any]:
    """The summary metrics among the files of `directory` (a run aside, or a published output
    as local files), {} where there are none or they are not JSON."""
    if rule.metrics_file is None:
        return {}
    try:
        return json.loads((directory / rule.metrics_file).read_text())
    except (OSError, ValueError):
        return {}


def numbers(values: dict[str, Any]) -> dict[str, Any]:
    """The values that are numbers (not booleans, not NaN)."""
    return {
        name: value
        for name, value in values.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    }


def evaluation_columns(rule: Rule | None, target: str, metrics: Any) -> dict[str, Any]:
    """An evaluation's numbers as columns named by what it evaluated, as its rule says
    (`Rule.evaluated`): `eval.<data set or task>.<metric>`. A rule that does not say has its
    numbers named by the target (`<target name>.<metric>`)."""
    if not isinstance(metrics, dict):
        return {}
    if rule is None or rule.evaluated is None:
        return {f"{target.rsplit(':', 1)[-1]}.{name}": value for name, value in numbers(metrics).items()}
    found: dict[str, Any] = {}
    for what, values in rule.evaluated(metrics).items():
        prefix = f"eval.{what}" if what else "eval"
        found.update((f"{prefix}.{name}", value) for name, value in numbers(values).items())
    return found
