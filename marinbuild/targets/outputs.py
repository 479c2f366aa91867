"""What a rule declares its outputs hold, for the engine's readers: `show`, `compare` and the
report read these declarations, never a rule's file names or fields.

Besides `Rule.metrics_file` (a JSON file of summary numbers) and `Rule.evaluated` (an
evaluation's numbers by what it evaluated), a rule may declare `Curves` (the metrics a
training step logs per step: its output is then a *run*) and a `ReportSection` (its own
part of the report, written by the rule's code from the `StepOutputs` the report read).
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Series = tuple[str, list[int], list[float]]  # a curve: its metric, steps and values


@dataclass(frozen=True)
class Curves:
    """The metrics a training step logs as it runs. `file`: a JSON-lines file among its
    outputs, a row per step (`{"step": 10, "train/loss": 4.2, ...}`); `metrics`: the curves
    compared and drawn, the first solid and the others dashed; `per_set`: a pattern
    (`eval/*/loss`) naming a curve per evaluation set, drawn dotted where there are several.
    The output of a rule that declares curves is a run, a row of `compare` and the report."""

    file: str
    metrics: tuple[str, ...]
    per_set: str | None = None

    @staticmethod
    def rows(data: bytes) -> list[dict[str, Any]]:
        """The rows of the file that have a step: a torn or foreign line is skipped, not an error."""
        rows = []
        for line in data.decode(errors="replace").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                rows.append(row)
        return rows

    def series(self, rows: Sequence[Mapping[str, Any]], every_set: bool = False) -> list[Series]:
        """Each declared curve the rows hold a number of; with `every_set`, then the curve of
        each evaluation set, where there are several (with one, it is the overall one again)."""
        wanted = list(self.metrics)
        if every_set and self.per_set is not None:
            names = {name for row in rows for name in row}
            sets = sorted(name for name in names if fnmatch.fnmatchcase(name, self.per_set) and name not in wanted)
            wanted += sets if len(sets) > 1 else []
        found = []
        for metric in wanted:
            points = [(row["step"], float(row[metric])) for row in rows if isinstance(row.get(metric), (int, float))]
            if points:
                found.append((metric, [step for step, _ in points], [value for _, value in points]))
        return found


@dataclass(frozen=True)
class StepOutputs:
    """What the report read of one step's outputs for its rule's section: `files`, the small
    files the section `reads`, by path, and `plots` (images, by path), each checked against
    its digest; `link`, the address of the step's page from the page the section is on."""

    label: str
    link: str
    files: Mapping[str, bytes]
    plots: tuple[tuple[str, bytes], ...]

    def json(self, name: str) -> Any | None:
        """The JSON file `name`, or None if the step has none or it is not JSON."""
        data = self.files.get(name)
        try:
            return None if data is None else json.loads(data)
        except ValueError:
            return None


@dataclass(frozen=True)
class ReportSection:
    """A rule's own section of the report, for what only the rule knows how to show (a
    scaling fit's laws and forecasts). `render` ("module:function") is imported only when a
    report is written, so the engine imports no rule: given a step's `StepOutputs`, it
    returns the section's HTML, or None when they hold nothing to show. `reads`: the output
    files it needs; `title` heads the section on the step's page; on the index page,
    `index_title` heads every step's section together, in the element `index_id`."""

    render: str
    reads: tuple[str, ...]
    title: str
    index_title: str
    index_id: str
