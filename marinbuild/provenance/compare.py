"""Training runs side by side: `marinbuild compare`, `marinbuild.compare()` and the report's runs table.

A *run* is an output with a `metrics.jsonl` (a `train_lm` step: one row per step); its
*evaluations* are the outputs of the selected targets that took it as an input and have
summary metrics of their own (`eval_lm`'s `metrics.json`). Everything is read back from
the store, through the action-cache entries and their manifests (every file is checked
against its digest): a run's hyperparameters are the attributes its attempt recorded,
its final metrics its `summary.json` (the rule's `metrics_file`) and what its building
attempt measured, and an evaluation belongs to the run whose key it read.

What tells runs apart may lie upstream: two trainings of one recipe on data cut at two
quality thresholds differ only in a step two before their tokens. So each run's recipe is
walked up through the entries of what it read, recursively (its *lineage*), and every
attribute that differs anywhere in it is a column beside the hyperparameters, named by
where it is (`datamix:docs_scored.threshold`). A target upstream of every run is matched
by its label; the others (a sweep's own chain per run, `scored_05`, `scored_07`) by how
the run reaches them, and named by what their labels share (`ablation:scored_*`). A value
is compared among the runs that have it: fine-tuning runs, which take their architecture
from their base model, add no `model.*` column beside pretraining runs; a target in some
lineages only is a column of its own (its rule where present).

An evaluation's numbers are named by what it evaluated, as its rule says
(`Rule.evaluated`): `eval.<data set or task>.<metric>`, so that every evaluation of the
same data shares a column, whichever target made it and whichever run it evaluated.

With `history`, every earlier output of the same labels still in the store is a row
too: after a change of the best run's learning rate, the old best is still there to
compare with.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import os
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from marinbuild.actions.analysis.graph import Graph
from marinbuild.actions.bookkeeping.results import BuildResult, Status
from marinbuild.errors import GraphError
from marinbuild.provenance.attempts import label_attempts
from marinbuild.store import ActionCache, AttemptStatus, CacheEntry
from marinbuild.targets.rule import COMMON_ATTRS, Rule, checkpoint_name

METRICS_FILE = "metrics.jsonl"  # one JSON object a step: what makes an output a run
# What the attempt that built a run measured (`ctx.measure`), shown with its metrics.
MEASURED_COLUMNS = ("tokens_per_s", "wall_time_s", "time_to_first_step_s")
CURVE_METRICS = ("train/loss", "eval/loss")
_MAX_CURVE_BYTES = 64 * 2**20

# Reads the entry of a key (None if the store has no usable one); `entry_reader` caches it.
ReadEntry = Callable[[str], "CacheEntry | None"]


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


# -- what a run is made of ------------------------------------------------------------------


class _Label(str):
    """A string of an attribute that names a target: shown by the name of its columns, and a
    key of a dict (mixture weights) flattened in brackets, `data[datamix:docs_tokens]`."""


def flatten(prefix: str, value: Any) -> Iterable[tuple[str, Any]]:
    """Nested attribute values as `model.hidden_dim = 64` leaves; a list of dicts (a filter
    chain) by position, `filters[1].min_words`; other lists whole, as JSON."""
    if isinstance(value, dict):
        for name, inner in value.items():
            if isinstance(name, _Label):
                yield from flatten(f"{prefix}[{name}]", inner)
            else:
                yield from flatten(f"{prefix}.{name}" if prefix else str(name), inner)
    elif isinstance(value, list) and value and all(isinstance(inner, dict) for inner in value):
        for index, inner in enumerate(value):
            yield from flatten(f"{prefix}[{index}]", inner)
    elif isinstance(value, (str, int, float, bool)) or value is None:
        yield prefix, str(value) if isinstance(value, _Label) else value
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
    """`value` with every string naming one of `inputs` (a dict key too) made a `_Label`;
    a target read at a step is named in the inputs as that kept state (`checkpoint_name`)."""
    if isinstance(value, dict):
        return {_mark_labels(name, inputs): _mark_labels(inner, inputs) for name, inner in value.items()}
    if isinstance(value, list):
        return [_mark_labels(inner, inputs) for inner in value]
    if isinstance(value, str) and _input_of(value, inputs) is not None:
        return _Label(value)
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


def _labels(value: Any) -> list[_Label]:
    """The `_Label`s of a marked value, in order, each once."""
    found: list[_Label] = []
    if isinstance(value, dict):
        for name, inner in value.items():
            found += _labels(name) + _labels(inner)
    elif isinstance(value, list):
        for inner in value:
            found += _labels(inner)
    elif isinstance(value, _Label):
        found.append(value)
    return list(dict.fromkeys(found))


def _relabel(value: Any, names: Mapping[str, str]) -> Any:
    """A marked value with each label replaced by the name its columns go by."""
    if isinstance(value, dict):
        return {_relabel(name, names): _relabel(inner, names) for name, inner in value.items()}
    if isinstance(value, list):
        return [_relabel(inner, names) for inner in value]
    if isinstance(value, _Label):
        return _Label(names.get(value, value))
    return value


def _numbers(values: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: value
        for name, value in values.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    }


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
            for position, label in enumerate(_labels(value)):
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


# -- what differs ---------------------------------------------------------------------------

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
    own = {name: _relabel(value, named) for name, value in found.attrs.items() if name in labelled}
    groups = {name: dict(flatten(name, value)) for name, value in own.items()}
    groups[_TARGETS] = {named[label]: node.what for label, node in found.upstream.items()}
    for label, node in found.upstream.items():
        for attr, value in node.attrs.items():
            where = f"{named[label]}.{attr}"
            groups[where] = dict(flatten(where, _relabel(value, named)))
    return groups


def side_by_side(entries: Sequence[CacheEntry], read: ReadEntry, rules: Mapping[str, Rule]) -> Differences:
    """The differences between the runs whose entries are `entries`, in their own recipes
    and in their lineages (each entry read once, whichever runs share it)."""
    lineages = [lineage(entry, read, rules) for entry in entries]
    names = align(lineages)
    # An attribute naming a target in any run (`data`, `init_from`) is of the lineage in every run.
    labelled = {name for found in lineages for name, value in found.attrs.items() if _labels(value)}
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


# -- evaluations ----------------------------------------------------------------------------


def evaluation_columns(rule: Rule | None, target: str, metrics: Any) -> dict[str, Any]:
    """An evaluation's numbers as columns named by what it evaluated, as its rule says
    (`Rule.evaluated`): `eval.<data set or task>.<metric>`. A rule that does not say has its
    numbers named by the target (`<target name>.<metric>`)."""
    if not isinstance(metrics, dict):
        return {}
    if rule is None or rule.evaluated is None:
        return {f"{target.rsplit(':', 1)[-1]}.{name}": value for name, value in _numbers(metrics).items()}
    found: dict[str, Any] = {}
    for what, values in rule.evaluated(metrics).items():
        prefix = f"eval.{what}" if what else "eval"
        found.update((f"{prefix}.{name}", value) for name, value in _numbers(values).items())
    return found


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
        self.read = entry_reader(cache)  # entries, for lineages too
        self._usable: dict[str, CacheEntry | None] = {}

    def usable(self, key: str) -> CacheEntry | None:
        """The entry of `key` if its outputs are still in the store, verified."""
        if key not in self._usable:
            entry = self.read(key)
            self._usable[key] = entry if entry is not None and self.cache.lookup(key).outputs is not None else None
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
    if not runs:
        raise GraphError(
            "no training run among the targets named has an output in the store"
            + ("" if history else " for its current recipe"),
            hint="a run is a step whose output has a metrics.jsonl (train_lm); build it, or add --history",
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
    curves = [curve for output in runs for curve in _curves(cache, output)]
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
    metrics = _numbers(_read_json(cache, run.entry, rule.metrics_file if rule else None) or {})
    measured = run.entry.provenance.get("measured", {})
    metrics.update(_numbers({name: measured.get(name) for name in MEASURED_COLUMNS}))
    for evaluation in evaluations:
        evaluation_rule = rules.get(evaluation.entry.recipe["rule"])
        found = _read_json(cache, evaluation.entry, evaluation_rule.metrics_file if evaluation_rule else None)
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
