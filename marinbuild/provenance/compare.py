"""Training runs side by side: `marinbuild compare` and `marinbuild.compare()`.

A *run* is an output with a `metrics.jsonl` (a `train_lm` step: one row per step); its
*evaluations* are the outputs of the selected targets that took it as an input and have
summary metrics of their own (`eval_lm`'s `metrics.json`). Everything is read back from
the store, through the action-cache entries and their manifests (every file is checked
against its digest): a run's hyperparameters are the attributes its attempt recorded,
its final metrics its `summary.json` (the rule's `metrics_file`) and what its building
attempt measured, and an evaluation belongs to the run whose key it read.

With `history`, every earlier output of the same labels still in the store is a row
too: after a change of the best run's learning rate, the old best is still there to
compare with.

Evaluations of different runs that evaluate alike (the same rule and attributes but for
the run) share their columns: `eval.loss`, not one column per evaluation target. The
report's runs table uses the same rule (`evaluation_prefixes`).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from marinbuild.actions.graph import Graph
from marinbuild.actions.results import BuildResult, Status
from marinbuild.errors import GraphError
from marinbuild.provenance.attempts import label_attempts
from marinbuild.store import ActionCache, AttemptStatus, CacheEntry
from marinbuild.targets.rule import Rule

METRICS_FILE = "metrics.jsonl"  # one JSON object a step: what makes an output a run
# What the attempt that built a run measured (`ctx.measure`), shown with its metrics.
MEASURED_COLUMNS = ("tokens_per_s", "wall_time_s", "time_to_first_step_s")
CURVE_METRICS = ("train/loss", "eval/loss")
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
    """Training runs side by side: one row per run output, with the hyperparameters that
    differ between them (`shared` holds those they all have alike), their final metrics
    and their evaluations', and the best run marked by the metric `by`.

    `rows` are dicts over `columns` (a value may be None); `to_pandas()` makes a DataFrame
    of them, `to_csv()` CSV, `curves_csv()` the loss curves in long form."""

    columns: tuple[str, ...]
    rows: list[dict[str, Any]]
    shared: dict[str, Any] = field(default_factory=dict)
    by: str | None = None
    maximize: bool = False
    curves: list[Curve] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # runs left out, and why

    @property
    def best(self) -> dict[str, Any] | None:
        return next((row for row in self.rows if row.get("best")), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "columns": list(self.columns),
            "rows": self.rows,
            "shared": self.shared,
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


# -- what a run is made of ------------------------------------------------------------------


def flatten(prefix: str, value: Any) -> Iterable[tuple[str, Any]]:
    """Nested attribute values as `model.hidden_dim = 64` leaves."""
    if isinstance(value, dict):
        for name in value:
            yield from flatten(f"{prefix}.{name}" if prefix else str(name), value[name])
    elif isinstance(value, (str, int, float, bool)) or value is None:
        yield prefix, value
    else:
        yield prefix, json.dumps(value)


def hyperparameters(rule: Rule | None, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A run's identity attributes that name no other target, flattened (model.hidden_dim...);
    without its rule (no longer in the workspace), every attribute but the common ones."""
    found: dict[str, Any] = {}
    for name, value in attrs.items():
        attr = rule.attrs.get(name) if rule is not None else None
        if rule is not None and (attr is None or not attr.identity or attr.type.labels(value)):
            continue
        if rule is None and name in ("name", "tags", "description", "resources", "timeout"):
            continue
        found.update(flatten(name, value))
    return found


def _signature(rule_name: str, rule: Rule | None, attrs: Mapping[str, Any], runs: set[str]) -> str:
    """What an evaluation evaluates, but for the run: evaluations of different runs with
    the same signature share their columns."""
    kept = {
        name: value
        for name, value in attrs.items()
        if rule is None or (name in rule.attrs and rule.attrs[name].identity)
    }
    text = json.dumps(kept, sort_keys=True)
    for run in runs:
        text = text.replace(json.dumps(run), '"<run>"')
    return f"{rule_name}:{text}"


def _other_labels(value: Any, runs: set[str]) -> list[str]:
    """The target names of the labels an evaluation's attributes mention, but the runs'."""
    if isinstance(value, dict):
        return [name for key, inner in value.items() for name in _other_labels([key, inner], runs)]
    if isinstance(value, list):
        return [name for inner in value for name in _other_labels(inner, runs)]
    if isinstance(value, str) and value.startswith("//") and ":" in value and value not in runs:
        return [value.rsplit(":", 1)[1]]
    return []


def evaluation_prefixes(
    evaluations: Mapping[str, tuple[str, Rule | None, Mapping[str, Any]]], runs: Iterable[str]
) -> dict[str, str]:
    """{evaluation label: the prefix of its columns}, from {label: (rule name, rule, attrs)}.

    Evaluations that evaluate alike — the same rule and identity attributes, but for the
    run they evaluate — share a prefix: `eval` when there is one kind, else
    `eval[<what it evaluates>]` (the names of the other targets it reads, e.g. its data
    sets), or `eval[<its target name>]` where those do not tell kinds apart."""
    run_labels = set(runs)
    signatures = {
        label: _signature(rule_name, rule, attrs, run_labels) for label, (rule_name, rule, attrs) in evaluations.items()
    }
    kinds = list(dict.fromkeys(signatures.values()))
    if len(kinds) <= 1:
        return {label: "eval" for label in evaluations}
    first = {kind: next(label for label, found in signatures.items() if found == kind) for kind in kinds}
    described = {
        kind: "+".join(dict.fromkeys(_other_labels(dict(evaluations[first[kind]][2]), run_labels))) for kind in kinds
    }
    distinct = len(set(described.values())) == len(kinds) and all(described.values())
    names = {kind: described[kind] if distinct else first[kind].rsplit(":", 1)[1] for kind in kinds}
    return {label: f"eval[{names[signatures[label]]}]" for label in evaluations}


def _numbers(values: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: value
        for name, value in values.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    }


# -- reading runs back ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Output:
    label: str
    entry: CacheEntry
    current: bool  # the output of the target's current recipe


def _file(entry: CacheEntry, path: str, limit: int = _MAX_CURVE_BYTES) -> Any:
    return next((item for item in entry.manifest.files if item.path == path and item.size <= limit), None)


def metric_rows(data: bytes) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl that have a step: a torn or foreign line is skipped, not an error."""
    rows = []
    for line in data.decode(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows.append(row)
    return rows


def _read_json(cache: ActionCache, entry: CacheEntry, path: str | None) -> Any:
    listed = _file(entry, path) if path else None
    data = cache.read_output(entry.key, listed) if listed is not None else None
    try:
        return json.loads(data) if data is not None else None
    except ValueError:
        return None


def _curves(cache: ActionCache, output: _Output) -> list[Curve]:
    listed = _file(output.entry, METRICS_FILE)
    data = cache.read_output(output.entry.key, listed) if listed is not None else None
    if data is None:
        return []
    rows = metric_rows(data)
    curves = []
    for metric in CURVE_METRICS:
        points = [(row["step"], float(row[metric])) for row in rows if isinstance(row.get(metric), (int, float))]
        if points:
            steps, values = zip(*points)
            curves.append(Curve(output.label, output.entry.key, metric, steps, values))
    return curves


class _Reader:
    """Reads outputs of the store for one comparison, each entry once."""

    def __init__(self, cache: ActionCache):
        self.cache = cache
        self._entries: dict[str, CacheEntry | None] = {}

    def usable(self, key: str) -> CacheEntry | None:
        """The entry of `key` if its outputs are still in the store, verified."""
        if key not in self._entries:
            entry = self.cache.read_entry(key)
            ok = isinstance(entry, CacheEntry) and self.cache.lookup(key).outputs is not None
            self._entries[key] = entry if ok and isinstance(entry, CacheEntry) else None
        return self._entries[key]

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


def compare(
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
    reader = _Reader(cache)
    graph_targets = graph.targets
    notes: list[str] = []
    runs: list[_Output] = []
    evaluators: list[str] = []
    for label in graph.requested:
        result = planned.results[label]
        current_key = result.key if result.status is Status.CACHED else None
        outputs = reader.outputs(label, current_key, history)
        summarised = graph_targets[label].rule.metrics_file is not None
        if any(_file(output.entry, METRICS_FILE) is not None for output in outputs):
            runs += [output for output in outputs if _file(output.entry, METRICS_FILE) is not None]
        elif summarised:
            evaluators.append(label)
        if current_key is None and summarised:
            notes.append(
                f"{label} is not built for its current recipe ({result.reason})"
                + ("" if history else "; --history shows its earlier outputs")
            )
    run_labels = {output.label for output in runs}
    if not runs:
        raise GraphError(
            "no training run among the targets named has an output in the store"
            + ("" if history else " for its current recipe"),
            hint="a run is a step whose output has a metrics.jsonl (train_lm); build it, or add --history",
        )
    evaluations = _evaluations(cache, reader, graph.deps, evaluators, run_labels, planned)
    prefixes = evaluation_prefixes(
        {
            label: (graph_targets[label].rule.name, graph_targets[label].rule, dict(graph_targets[label].attrs))
            for label in evaluators
        },
        run_labels,
    )
    rows, params = [], []
    for output in runs:
        rule = rules.get(output.entry.recipe["rule"])
        params.append(hyperparameters(rule, output.entry.provenance.get("attrs", output.entry.recipe["attrs"])))
        row: dict[str, Any] = {"run": output.label, "key": output.entry.key[:12]}
        if history:
            row["current"] = output.current
        row["built"] = output.entry.provenance.get("finished")
        evaluated = evaluations.get((output.label, output.entry.key), [])
        rows.append((row, _metrics(cache, rules, output, evaluated, prefixes)))
    names = list(dict.fromkeys(name for found in params for name in found))
    differing = [name for name in names if len({json.dumps(found.get(name)) for found in params}) > 1]
    shared = {name: params[0].get(name) for name in names if name not in differing}
    metric_names = list(dict.fromkeys(name for _row, metrics in rows for name in metrics))
    if by is not None and by not in metric_names:
        raise GraphError(
            f"no run has a metric '{by}'", hint=f"the metrics of these runs: {', '.join(metric_names) or 'none'}"
        )
    table = [
        {**row, **{name: found.get(name) for name in differing}, **{name: metrics.get(name) for name in metric_names}}
        for (row, metrics), found in zip(rows, params)
    ]
    table = _rank(table, by, maximize)
    columns = tuple(table[0].keys())  # every row has the same; `best` last
    curves = [curve for output in runs for curve in _curves(cache, output)]
    return Comparison(tuple(columns), table, shared, by, maximize, curves, notes)


def _metrics(
    cache: ActionCache,
    rules: Mapping[str, Rule],
    run: _Output,
    evaluations: Sequence[_Output],
    prefixes: Mapping[str, str],
) -> dict[str, Any]:
    """A run's final numbers: its summary (the rule's `metrics_file`), what its building
    attempt measured, and each evaluation's summary under its kind's prefix (`eval.loss`)."""
    rule = rules.get(run.entry.recipe["rule"])
    metrics = _numbers(_read_json(cache, run.entry, rule.metrics_file if rule else None) or {})
    measured = run.entry.provenance.get("measured", {})
    metrics.update(_numbers({name: measured.get(name) for name in MEASURED_COLUMNS}))
    for evaluation in evaluations:
        evaluation_rule = rules.get(evaluation.entry.recipe["rule"])
        found = _read_json(cache, evaluation.entry, evaluation_rule.metrics_file if evaluation_rule else None)
        prefix = prefixes.get(evaluation.label, "eval")
        metrics.update((f"{prefix}.{name}", value) for name, value in _numbers(found or {}).items())
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
