"""How `log`, `history`, `explain`, `show` and `compare` print what the store records."""

from __future__ import annotations

import json
from typing import Any

from marinbuild.actions.analysis.keys import short
from marinbuild.actions.bookkeeping.machines import Machine
from marinbuild.provenance import AttemptRecord, HistoryItem
from marinbuild.provenance.compare import Comparison
from marinbuild.provenance.data_counts import FIELDS, DataCounts, data_counts
from marinbuild.provenance.explain import Explanation
from marinbuild.targets.compute import Estimate
from marinbuild.targets.distributions import FIELD as DISTRIBUTIONS
from marinbuild.targets.distributions import Distribution, distributions


def attempt_line(record: AttemptRecord) -> str:
    """One line per attempt: when, result, where, how long, and the error of a failure."""
    parts = [
        record.started or "?",
        f"{record.status.value:10}",
        record.label,
        f"key {short(record.key)}",
        f"attempt {record.attempt_id}",
        f"{record.user or '?'}@{record.host or '?'}",
    ]
    if record.executor is not None:  # where it ran, if not (only) the builder's host
        parts.append(f"on {record.where(short=True)}")
    if record.duration_s is not None:
        parts.append(f"{record.duration_s:.1f}s")
    if record.exit_status is not None:
        parts.append(f"exit status {record.exit_status}")
    if record.aside:
        parts.append(f"(aside: {record.aside}, not published)")
    line = "  ".join(parts)
    if record.error:
        line += f"\n      {record.error.splitlines()[0]}"
    return line


def log_header(record: AttemptRecord, number: int, total: int) -> str:
    return f"attempt {number} of {total}: {attempt_line(record)}"


def history_lines(items: list[HistoryItem]) -> list[str]:
    lines = []
    for item in items:
        invocation = item.invocation
        counts = ", ".join(
            f"{count} {status}" for status, count in invocation.record.get("counts", {}).items() if count
        )
        lines.append(
            f"{invocation.started or '?'}  {invocation.result:11}  {invocation.user or '?'}@{invocation.host or '?'}"
            f"  {invocation.command} {' '.join(invocation.patterns)}  ({counts or 'nothing done'})"
            f"  invocation {invocation.invocation_id}"
        )
        for outcome, attempt in item.outcomes:
            line = f"    {outcome.status:8} {outcome.label}"
            if outcome.key:
                line += f"  key {short(outcome.key)}"
            if attempt is not None:
                line += f"  attempt {attempt.attempt_id}"
                if attempt.duration_s is not None:
                    line += f"  {attempt.duration_s:.1f}s"
                if attempt.executor is not None:
                    line += f"  on {attempt.where(short=True)}"
                if attempt.error:
                    line += f"\n        {attempt.error.splitlines()[0]}"
            lines.append(line)
    return lines


def explanation_lines(explanation: Explanation, indent: str = "") -> list[str]:
    lines = [f"{indent}{explanation.label}: {explanation.summary}"]
    if explanation.resumes_from:
        lines.append(
            f"{indent}  would resume from {explanation.resumes_from}: an earlier attempt at this key left it "
            "in its scratch space"
        )
    if explanation.key:
        lines.append(f"{indent}  key {explanation.key}")
    if explanation.changes:
        lines.append(f"{indent}  changed since {short(explanation.previous_key or '')}:")
        lines += [f"{indent}    {change}" for change in explanation.changes]
    if explanation.ingredients:
        lines.append(f"{indent}  ingredients of its key:")
        lines += [f"{indent}    {item}" for item in explanation.ingredients]
    for upstream in explanation.upstream:
        lines += explanation_lines(upstream, indent + "  ")
    return lines


def show_lines(description: dict) -> list[str]:
    if description.get("external"):
        return _external_lines(description)
    recipe = description["recipe"]
    lines = [
        f"{description['label']}",
        f"  key          {description['key']}",
        f"  tree digest  {description['tree_digest']}",
        f"  rule         {recipe['rule']} version {recipe['version']}",
    ]
    if description.get("mirrored"):
        lines.append(f"  in a mirror  {description['mirrored']['summary']}")
    if recipe.get("salt"):
        lines.append(f"  store salt   {recipe['salt']!r}")
    lines.append("  attributes")
    lines += [f"    {name} = {json.dumps(value)}" for name, value in recipe["attrs"].items()]
    if recipe["inputs"]:
        lines.append("  inputs")
        lines += _input_lines(recipe["inputs"], "    ")
    lines.append("  provenance")
    for name, value in description["provenance"].items():
        if name == "ran_on":
            lines += _machine_lines(value)
        else:
            lines.append(f"    {name}: {json.dumps(value) if isinstance(value, dict) else value}")
    if description.get("estimate"):
        estimated = Estimate.from_json(description["estimate"])
        lines.append(f"  estimate     {estimated.against(description['provenance'].get('duration_s'))}")
    copied = description.get("copied")
    if copied:
        lines.append(
            f"  copied       from {copied['from']} ({copied['from_region']} → {copied['to_region']}), "
            f"{copied['bytes']:,} bytes, {copied['copied']} by {copied['by']}"
        )
    lines.append(f"  outputs ({len(description['outputs'])} files, {description['total_bytes']:,} bytes)")
    lines += [
        f"    {item['path']}  {item['size']:,} bytes  {short(item['blake3'])}"
        for item in description["outputs"][:_FILES_SHOWN]
    ]
    if len(description["outputs"]) > _FILES_SHOWN:
        lines.append(f"    ... and {len(description['outputs']) - _FILES_SHOWN} more (--json lists them all)")
    counts = data_counts(description["metrics"])
    if counts is not None:
        lines += data_lines(counts)
    cuts = distributions(description["metrics"])
    if cuts is not None:
        lines += distribution_lines(cuts)
    shown = (FIELDS if counts is not None else ()) + ((DISTRIBUTIONS,) if cuts is not None else ())
    metrics = {name: value for name, value in description["metrics"].items() if name not in shown}
    if metrics:
        lines.append("  metrics")
        lines += [f"    {name}: {value}" for name, value in metrics.items()]
    if description["measured"]:
        lines.append("  measured by the attempt that built it (not part of the output)")
        lines += [f"    {name}: {value}" for name, value in description["measured"].items()]
    if description.get("checkpoints"):
        lines.append("  kept checkpoints (each an entry of its own, not in the outputs above: marinbuild show KEY)")
        lines += [
            f"    step {step}  key {key}  in {description['checkpoint_outputs'][step]}"
            for step, key in description["checkpoints"].items()
        ]
    return lines


_FILES_SHOWN = 20


def _machine_lines(ran_on: list[dict[str, Any]]) -> list[str]:
    """Where the attempt ran (machines.py): on its line, or one line a host (or a node its
    units ran on)."""
    machines = [Machine.from_json(item) for item in ran_on]
    if len(machines) == 1:
        return [f"    ran on: {machines[0].describe()}"]
    return [f"    ran on ({len(machines)} machines):", *(f"      {machine.describe()}" for machine in machines)]


def data_lines(counts: DataCounts) -> list[str]:
    """A data step's documents, what each filter kept and rejected (by reason), and its skips."""
    splits = ", ".join(f"{split} {count:,}" for split, count in counts.documents)
    lines = [f"  documents    {counts.total_documents:,} ({splits})"]
    if counts.filters:
        lines.append("  filters, in order (each sees what those before it kept)")
        width = max(len(item.name) for item in counts.filters)
        for item in counts.filters:
            share = f" ({item.kept_share:.1%})" if item.kept_share is not None else ""
            reasons = ", ".join(f"{reason} {count:,}" for reason, count in item.reasons)
            lines.append(
                f"    {item.name:{width}}  seen {item.seen:,}  kept {item.kept:,}{share}  rejected {item.rejected:,}"
                + (f": {reasons}" if reasons else "")
            )
    if counts.skipped:
        lines.append(f"  skipped      {counts.total_skipped:,} inputs passed over")
        width = max(len(item.reason) for item in counts.skipped)
        lines += [f"    {item.reason:{width}}  {item.count:,}  first at {item.first}" for item in counts.skipped]
    return lines


def distribution_lines(cuts: tuple[Distribution, ...]) -> list[str]:
    """Each distribution a step cut on, in two lines: its quantiles and what its threshold
    kept, then its histogram with `|` where the threshold falls."""
    lines = ["  distributions (of what the step cut on)"]
    width = max(len(cut.name) for cut in cuts)
    for cut in cuts:
        kept = cut.cut()
        lines.append(f"    {cut.name:{width}}  {cut.summary()}" + (f"; {kept}" if kept else ""))
        lines.append(f"    {'':{width}}  {cut.bars()}")
    return lines


def _input_lines(inputs: dict, indent: str) -> list[str]:
    lines = []
    for label, item in inputs.items():
        if "source" in item:
            lines.append(f"{indent}{label}  source {short(item['source'])}")
            continue
        if "blake3" in item:  # a file of a sharded step's unit (actions/execution/shards.py), by its content
            lines.append(f"{indent}{label}  file {short(item['blake3'])}, {item['size']:,} bytes")
            continue
        lines.append(f"{indent}{label}  output {short(item['tree_digest'])} of key {short(item['key'])}")
        made_by = item.get("made_by")
        if made_by and "error" in made_by:
            lines.append(f"{indent}  ({made_by['error']})")
        elif made_by:
            lines.append(
                f"{indent}  {made_by['recipe']['rule']} version {made_by['recipe']['version']}, "
                f"built {made_by['provenance'].get('finished', '?')}"
            )
            lines += _input_lines(made_by["recipe"]["inputs"], indent + "  ")
    return lines


# The widest a string cell is shown (a chat template, a regex): `--json` gives the whole of it.
_CELL_CHARACTERS = 40


def _cell(value: Any, cut: bool = True) -> str:
    """A table cell: floats to 4 significant digits, ints with separators, booleans as yes/no,
    a string on one line (newlines as \\n), cut to _CELL_CHARACTERS unless `cut` is False
    (a run's label)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if 1e3 <= abs(value) < 1e6 else f"{value:.4g}"
    text = str(value).replace("\n", "\\n")
    return text if not cut or len(text) <= _CELL_CHARACTERS else text[: _CELL_CHARACTERS - 1] + "…"


# Columns of a comparison that describe the run's output rather than measure it.
_RUN_COLUMNS = ("run", "key", "current", "built")


def comparison_lines(comparison: Comparison) -> list[str]:
    """The runs as an aligned table, the best one marked `*`, then what every run shares:
    metrics equal in every row (steps, tokens, parameters of a learning-rate sweep) are
    said once below it rather than repeated (`--csv` and `--json` keep every column)."""
    rows = comparison.rows
    constant = {
        name: rows[0].get(name)
        for name in comparison.columns
        if len(rows) > 1
        and name not in (*_RUN_COLUMNS, "best", comparison.by)
        and len({json.dumps(row.get(name)) for row in rows}) == 1
    }
    columns = [name for name in comparison.columns if name != "best" and name not in constant]
    cells = [[_cell(row.get(name), cut=name not in _RUN_COLUMNS) for name in columns] for row in comparison.rows]
    widths = [max(len(name), *(len(row[index]) for row in cells)) for index, name in enumerate(columns)]
    numeric = [
        all(isinstance(row.get(name), (int, float)) or row.get(name) is None for row in comparison.rows)
        and not all(row.get(name) is None for row in comparison.rows)
        for name in columns
    ]

    def line(marker: str, values: list[str]) -> str:
        aligned = (
            value.rjust(width) if is_number else value.ljust(width)
            for value, width, is_number in zip(values, widths, numeric)
        )
        return f"{marker} " + "  ".join(aligned).rstrip()

    lines = [line(" ", columns)]
    lines += [line("*" if row.get("best") else " ", values) for row, values in zip(comparison.rows, cells)]
    if comparison.by:
        best = comparison.best
        order = "highest" if comparison.maximize else "lowest"
        lines.append(
            f"* best by {comparison.by} ({order}): {best['run']} ({best['key']})"
            if best
            else f"no run has {comparison.by}"
        )
    if constant:
        lines.append(f"same in every run: {_shared_text(constant)}")
    if comparison.shared:
        lines.append(
            f"{len(comparison.shared)} hyperparameters are the same in every run"
            + (f" ({_shared_text(comparison.shared)})" if len(comparison.shared) <= 6 else "; --json lists them")
        )
    if comparison.shared_upstream:
        upstream, targets = comparison.shared_upstream, comparison.upstream_targets
        lines.append(
            f"{len(upstream)} attributes of the {targets} targets upstream are the same in every run"
            + (f" ({_shared_text(upstream)})" if len(upstream) <= 6 else "; --json lists them (shared_upstream)")
        )
    lines += [f"note: {note}" for note in comparison.notes]
    return lines


def _shared_text(shared: dict[str, Any]) -> str:
    return ", ".join(f"{name} = {_cell(value)}" for name, value in shared.items())


def _external_lines(description: dict) -> list[str]:
    lines = [description["label"], f"  external artifact at {description['url']}"]
    pin = description["pin"]
    if pin is None:
        return [*lines, f"  not pinned: 'marinbuild pin {description['label']}'"]
    state = "what it holds now" if description["current"] else "CHANGED since: 'marinbuild pin' to accept it"
    return [
        *lines,
        f"  pinned       {pin['pinned']} by {pin['by']} ({state})",
        f"  digest       {pin['digest']}",
        f"  contents     {pin['objects']} objects, {pin['bytes']:,} bytes",
    ]
