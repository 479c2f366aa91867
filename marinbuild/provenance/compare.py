"""Training runs side by side: `marinbuild compare`, `marinbuild.compare()` and the report's runs table.

A *run* is an output of a rule that declares curves (`Rule.curves`: train_lm's
`metrics.jsonl`, a row per step); its *evaluations* are the outputs of the selected targets
that took it as an input and have summary metrics of their own (`Rule.metrics_file`).
Everything is read back from the store, through the action-cache entries and their
manifests (every file is checked against its digest): a run's hyperparameters and the
attributes upstream that tell it apart are its lineage's (provenance/lineage.py,
differences.py), its final metrics its summary and what its building attempt measured,
and an evaluation belongs to the run whose key it read. An evaluation's numbers are named
by what it evaluated (`eval.<data set or task>.<metric>`, provenance/metrics.py), so that
every evaluation of the same data shares a column.

With `history`, every earlier output of the same labels still in the store is a row
too: after a change of the best run's learning rate, the old best is still there to
compare with.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from marinbuild.actions.analysis.graph import Graph
from marinbuild.actions.bookkeeping.results import BuildResult, Status
from marinbuild.errors import GraphError
from marinbuild.provenance.attempts import label_attempts
from marinbuild.provenance.differences import side_by_side
from marinbuild.provenance.lineage import entry_reader
from marinbuild.provenance.metrics import evaluation_columns, numbers, readable_metrics
from marinbuild.store import ActionCache, AttemptStatus, CacheEntry
from marinbuild.targets.outputs import Curves
from marinbuild.targets.rule import Rule

# What the attempt that built a run measured (`ctx.measure`), shown with its metrics.
MEASURED_COLUMNS = ("tokens_per_s", "wall_time_s", "time_to_first_step_s")
_MAX_CURVE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Curve:
    """One loss curve of one run's output."""

    run: str  # the run's label
    key: str
    metric: str  # train/loss or eval/loss
    steps: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class Comparison:
    """Training runs side by side: one row per run output, with the hyperparameters and
    upstream attributes that differ between them (`shared` and `shared_upstream` hold those
    they all have alike), their final metrics and their evaluations', and the best run
    marked by the column `by`.

    `rows` are dicts over `columns` (a value may be None); `to_pandas()` makes a DataFrame
    of them, `to_csv()` CSV, `curves_csv()` the loss curves in long form."""

    columns: tuple[str, ...]
    rows: list[dict[str, Any]]
    shared: dict[str, Any] = field(default_factory=dict)
    by: str | None = None
    maximize: bool = False
    curves: list[Curve] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # runs left out, lineages cut short, and why
    shared_upstream: dict[str, Any] = field(default_factory=dict)
    upstream_targets: int = 0  # how many targets the runs' lineages hold, matched as above

    @property
    def best(self) -> dict[str, Any] | None:
        return next((row for row in self.rows if row.get("best")), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "columns": list(self.columns),
            "rows": self.rows,
            "shared": self.shared,
            "shared_upstream": self.shared_upstream,
            "by": self.by,
            "maximize": self.maximize,
            "notes": self.notes,
        }

    def to_csv(self) -> str:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(self.columns), lineterminator="\n")
        writer.writeheader()
        for row in self.rows:
            writer.writerow({name: "" if row.get(name) is None else row[name] for name in self.columns})
        return out.getvalue()

    def curves_csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["run", "key", "metric", "step", "value"])
        for curve in self.curves:
            for step, value in zip(curve.steps, curve.values):
                writer.writerow([curve.run, curve.key, curve.metric, step, value])
        return out.getvalue()

    def to_pandas(self) -> Any:
        """A pandas DataFrame of the rows (pandas is imported only here)."""
        import pandas

        return pandas.DataFrame(self.rows, columns=list(self.columns))


def column_named(name: str, columns: Sequence[str]) -> str:
    """The column `--by` names: as written; else the one column of that attribute or metric
    (`threshold` for `ablation:scored_*.threshold`), or `eval.<metric>` for the one
    evaluation column of that metric (`eval.loss` where the runs are evaluated on one data set)."""
    if name in columns:
        return name
    matches = [column for column in columns if column.endswith(f".{name}")]
    if not matches and name.startswith("eval."):
        metric = name.removeprefix("eval.")
        matches = [column for column in columns if column.startswith("eval.") and column.endswith(f".{metric}")]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise GraphError(f"'{name}' could be any of {', '.join(matches)}", hint="name one of those columns")
    raise GraphError(
        f"no run has a metric or attribute '{name}'",
        hint=f"the columns of these runs: {', '.join(columns) or 'none'}",
    )


# -- reading runs back ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Output:
    label: str
    entry: CacheEntry
    current: bool  # the output of the target's current recipe


def _file(entry: CacheEntry, path: str, limit: int = _MAX_CURVE_BYTES) -> Any:
    return next((item for item in entry.manifest.files if item.path == path and item.size <= limit), None)


def _declared_curves(rules: Mapping[str, Rule], output: _Output) -> Curves | None:
    """The curves the rule that made an output declares, if the output holds their file
    (not too large to read): then it is a run."""
    rule = rules.get(output.entry.recipe["rule"])
    curves = rule.curves if rule is not None else None
    return curves if curves is not None and _file(output.entry, curves.file) is not None else None


def _curves(cache: ActionCache, rules: Mapping[str, Rule], output: _Output) -> list[Curve]:
    declared = _declared_curves(rules, output)
    listed = _file(output.entry, declared.file) if declared is not None else None
    data = cache.read_output(output.entry.key, listed) if listed is not None else None
    if declared is None or data is None:
        return []
    return [
        Curve(output.label, output.entry.key, metric, tuple(steps), tuple(values))
        for metric, steps, values in declared.series(Curves.rows(data))
    ]


class _Reader:
    """Reads outputs of the store for one comparison, each entry once."""

    def __init__(self, cache: ActionCache, verified: Iterable[str] = ()):
        self.cache = cache
        self.read = entry_reader(cache)  # entries, for lineages too
        self._usable: dict[str, CacheEntry | None] = {}
        # The keys the dry run of this comparison found cached, their entries verified a
        # moment ago: not looked up twice. Their files are checked as they are read: the
        # summaries and curves shown (`read_output`), not a sweep's 1,000 runs of 94 files.
        self._verified = set(verified)

    def usable(self, key: str) -> CacheEntry | None:
        """The entry of `key` if its outputs are still in the store, verified."""
        if key not in self._usable:
            entry = self.read(key)
            whole = entry is not None and (key in self._verified or self.cache.lookup(key).outputs is not None)
            self._usable[key] = entry if whole else None
        return self._usable[key]

    def outputs(self, label: str, current_key: str | None, history: bool) -> list[_Output]:
        """The outputs of `label`: its current recipe's, then (with `history`) its earlier
        ones, newest first."""
        found: list[_Output] = []
        current = self.usable(current_key) if current_key is not None else None
        if current is not None:
            found.append(_Output(label, current, True))
        if history:
            seen = {current_key}
            for record in reversed(label_attempts(self.cache.store, label)):
                if record.status is AttemptStatus.SUCCEEDED and record.key not in seen:
                    seen.add(record.key)
                    entry = self.usable(record.key)
                    if entry is not None:
                        found.append(_Output(label, entry, False))
        return found


def compare_runs(
    cache: ActionCache,
    graph: Graph,
    planned: BuildResult,
    rules: Mapping[str, Rule],
    *,
    by: str | None = None,
    maximize: bool = False,
    history: bool = False,
) -> Comparison:
    """Compare the training runs among the graph's requested targets (their current
    outputs, as the dry run `planned` found them; with `history`, their earlier ones too),
    with the evaluations among them that read them."""
    reader = _Reader(cache, (result.key for result in planned.results.values() if result.status is Status.CACHED))
    graph_targets = graph.targets
    notes: list[str] = []
    runs: list[_Output] = []
    evaluators: list[str] = []
    for label in graph.requested:
        result = planned.results[label]
        current_key = result.key if result.status is Status.CACHED else None
        outputs = reader.outputs(label, current_key, history)
        summarised = graph_targets[label].rule.metrics_file is not None
        if any(_declared_curves(rules, output) is not None for output in outputs):
            runs += [output for output in outputs if _declared_curves(rules, output) is not None]
        elif summarised:
            evaluators.append(label)
        if current_key is None and summarised:
            notes.append(
                f"{label} is not built for its current recipe ({result.reason})"
                + ("" if history else "; --history shows its earlier outputs")
            )
    if not runs:
        raise GraphError(
            "no training run among the targets named has an output in the store"
            + ("" if history else " for its current recipe"),
            hint="a run is a step whose rule declares curves (train_lm's metrics.jsonl); build it, or add --history",
        )
    run_labels = {output.label for output in runs}
    evaluations = _evaluations(cache, reader, graph.deps, evaluators, run_labels, planned)
    differences = side_by_side([output.entry for output in runs], reader.read, rules)
    rows = []
    for output in runs:
        row: dict[str, Any] = {"run": output.label, "key": output.entry.key[:12]}
        if history:
            row["current"] = output.current
        row["built"] = output.entry.provenance.get("finished")
        evaluated = evaluations.get((output.label, output.entry.key), [])
        rows.append((row, _metrics(cache, rules, output, evaluated)))
    metric_names = list(dict.fromkeys(name for _row, metrics in rows for name in metrics))
    if by is not None:
        by = column_named(by, [*differences.columns, *metric_names])
    table = [
        {**row, **found, **{name: metrics.get(name) for name in metric_names}}
        for (row, metrics), found in zip(rows, differences.rows)
    ]
    table = _rank(table, by, maximize)
    columns = tuple(table[0].keys())  # every row has the same; `best` last
    curves = [curve for output in runs for curve in _curves(cache, rules, output)]
    return Comparison(
        columns,
        table,
        differences.shared,
        by,
        maximize,
        curves,
        [*notes, *differences.notes],
        differences.shared_upstream,
        differences.upstream_targets,
    )


def _metrics(
    cache: ActionCache, rules: Mapping[str, Rule], run: _Output, evaluations: Sequence[_Output]
) -> dict[str, Any]:
    """A run's final numbers: its summary (the rule's `metrics_file`), what its building
    attempt measured, and each evaluation's summary named by what it evaluated
    (`eval.tokens.loss`); of two evaluations of the same data, the first one's."""
    rule = rules.get(run.entry.recipe["rule"])
    metrics = numbers(readable_metrics(cache, run.entry, rule) or {})
    measured = run.entry.provenance.get("measured", {})
    metrics.update(numbers({name: measured.get(name) for name in MEASURED_COLUMNS}))
    for evaluation in evaluations:
        evaluation_rule = rules.get(evaluation.entry.recipe["rule"])
        found = readable_metrics(cache, evaluation.entry, evaluation_rule)
        for name, value in evaluation_columns(evaluation_rule, evaluation.label, found).items():
            metrics.setdefault(name, value)
    return metrics


def _rank(rows: list[dict[str, Any]], by: str | None, maximize: bool) -> list[dict[str, Any]]:
    """Rows sorted by `by` (best first; rows without it last), the best marked."""
    if by is None:
        return rows
    scored = [row for row in rows if isinstance(row.get(by), (int, float))]
    unscored = [row for row in rows if not isinstance(row.get(by), (int, float))]
    scored.sort(key=lambda row: row[by], reverse=maximize)
    for index, row in enumerate(scored + unscored):
        row["best"] = index == 0 and bool(scored)
    return scored + unscored


def _evaluations(
    cache: ActionCache,
    reader: _Reader,
    deps: Mapping[str, Sequence[str]],
    evaluators: Sequence[str],
    runs: set[str],
    planned: BuildResult,
) -> dict[tuple[str, str], list[_Output]]:
    """{(run label, run key): the evaluations of that output}: for each evaluation target
    reading a run, its newest output whose recorded input is that run's key (its
    current output first)."""
    found: dict[tuple[str, str], list[_Output]] = {}
    for label in evaluators:
        read = [run for run in runs if run in deps[label]]
        if not read:
            continue
        result = planned.results[label]
        candidates: list[tuple[str, dict[str, Any]]] = []
        if result.status is Status.CACHED and result.key is not None:
            entry = reader.usable(result.key)
            if entry is not None:
                candidates.append((result.key, entry.provenance.get("inputs", {})))
        for record in reversed(label_attempts(cache.store, label)):
            if record.status is AttemptStatus.SUCCEEDED:
                candidates.append((record.key, record.record.get("inputs", {})))
        taken: set[tuple[str, str]] = set()
        for key, inputs in candidates:
            for run in read:
                run_key = inputs.get(run, {}).get("key")
                if run_key is None or (run, run_key) in taken:
                    continue
                entry = reader.usable(key)
                if entry is not None:
                    taken.add((run, run_key))
                    found.setdefault((run, run_key), []).append(_Output(label, entry, key == result.key))
    return found
