"""The index page's training runs: a row per run (a step whose rule declares curves) with the
hyperparameters and upstream attributes that tell the runs apart, as `marinbuild compare`
finds them, its final metrics and its evaluations', and every run's curves in one figure.
"""

from __future__ import annotations

from html import escape
from typing import Any

from marinbuild.provenance.differences import Differences
from marinbuild.provenance.metrics import evaluation_columns, numbers
from marinbuild.report import plots
from marinbuild.report.blocks import STEPS_DIR, badge, link
from marinbuild.report.collect import Report, StepReport
from marinbuild.targets.html_blocks import cell, number, table

# What the attempt that built a run measured (`ctx.measure`), shown in the runs table.
MEASURED_COLUMNS = ("tokens_per_s", "wall_time_s")


def final_metrics(report: Report, step: StepReport) -> dict[str, Any]:
    """The run's summary metrics (else the last value of each of its curves), the speed its
    building attempt measured, then the numbers of each evaluation built on it, named by
    what it evaluated as `marinbuild compare` names them (`eval.tokens.loss`); of two
    evaluations of the same data, the first one's."""
    rule = step.target.rule
    summary = step.json_file(rule.metrics_file) if rule.metrics_file else None
    found: dict[str, Any] = {}
    if isinstance(summary, dict):
        found.update(numbers(summary))
    else:
        for curve in plots.run_curves(step.label, step.curve_rows, rule.curves):
            found[curve.metric] = curve.values[-1]
    measured = step.entry.provenance.get("measured", {}) if step.entry is not None else {}
    found.update(numbers({name: measured.get(name) for name in MEASURED_COLUMNS}))
    for dependent in step.dependents:
        evaluation = report.steps[dependent]
        rule = evaluation.target.rule
        if rule.metrics_file is None or step.label in {label for label, _at in evaluation.target.steps_read().values()}:
            continue  # no metrics, or it evaluates a checkpoint the run kept, not the run
        for name, value in evaluation_columns(rule, dependent, evaluation.json_file(rule.metrics_file)).items():
            found.setdefault(name, value)
    return found


def _shared_note(differences: Differences, runs: int) -> str:
    """What every run has alike, said once above the table: the hyperparameters, and how many
    attributes upstream (listed when the line is clicked)."""
    parts = []
    if differences.shared:
        common = ", ".join(f"{name} = {number(value)}" for name, value in differences.shared.items())
        label = "Common to every run" if runs > 1 else "Hyperparameters"
        parts.append(f'<p id="shared-hyperparameters">{label}: {escape(common)}</p>')
    upstream = differences.shared_upstream
    if upstream:
        listed = "".join(f"<li>{escape(name)} = {escape(number(value))}</li>" for name, value in upstream.items())
        parts.append(
            f'<details id="shared-upstream"><summary>{len(upstream)} attributes of the '
            f"{differences.upstream_targets} targets upstream are the same in every run</summary>"
            f"<ul>{listed}</ul></details>"
        )
    return "".join(parts)


def runs_section(report: Report) -> str:
    runs, differences = report.runs, report.differences
    if not runs or differences is None:
        return (
            '<section id="runs"><h2>Training runs</h2>'
            '<p class="meta">No built step of the selection is a training run.</p></section>'
        )
    metrics = {step.label: final_metrics(report, step) for step in runs}
    metric_names = list(dict.fromkeys(name for found in metrics.values() for name in found))
    rows = [
        [f"<td>{link(step.label, STEPS_DIR + '/')}</td>", f"<td>{badge(step.status)}</td>"]
        + [cell(found.get(name)) for name in differences.columns]
        + [cell(metrics[step.label].get(name)) for name in metric_names]
        for step, found in zip(runs, differences.rows)
    ]
    runs_table = table(["run", "status", *differences.columns, *metric_names], rows, "runs-table", sortable=True)
    one_package = len({step.target.label.package for step in runs}) == 1
    curves = [
        curve
        for step in runs
        for curve in plots.run_curves(
            f":{step.target.label.name}" if one_package else step.label, step.curve_rows, step.target.rule.curves
        )
    ]
    figure = (
        f'<figure id="loss-curves">{plots.curves_svg(curves, "Loss (train solid, eval dashed)")}</figure>'
        if curves
        else ""
    )
    notes = "".join(f'<p class="meta">{escape(note)}</p>' for note in differences.notes)
    return (
        '<section id="runs"><h2>Training runs</h2>'
        '<p class="meta">Hyperparameters are the recipe\'s, and so are the attributes upstream that tell the '
        "runs apart (<code>ablation:scored_*.threshold</code>: of the target in that place of each run's lineage); "
        "final metrics come from each run's outputs and its evaluations, named by what they evaluated, tokens_per_s "
        "and wall_time_s from the attempt that trained it. Click a column to sort.</p>"
        + _shared_note(differences, len(runs))
        + f"{notes}{runs_table}<h3>Loss curves</h3>{figure}</section>"
    )
