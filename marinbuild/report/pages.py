"""The report's HTML: an index page and one page per step, each a self-contained file.

Styles, the table-sorting script, the graph and the curves are inline; images are data:
URIs. A report directory can be copied anywhere (a bucket, a laptop) and opened offline.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Any

from marinbuild.actions.analysis.keys import checkpoint_key
from marinbuild.hashing import digest_bytes
from marinbuild.provenance import AttemptRecord
from marinbuild.provenance.compare import Differences, evaluation_columns
from marinbuild.provenance.data_counts import DataCounts, data_counts
from marinbuild.report import diagram, plots
from marinbuild.report.collect import SUMMARY_FILE, AttemptView, OutputFile, Report, StepReport, StepStatus
from marinbuild.sizes import human_size
from marinbuild.targets.distributions import Distribution, distributions

STEPS_DIR = "steps"
_MAX_FILES_LISTED = 500
_MIME = {".png": "image/png", ".svg": "image/svg+xml"}

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 1280px; padding: 1em 2em; color: #212121; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #cfd8dc; padding-bottom: .2em; margin-top: 1.6em; }
a { color: #1565c0; text-decoration: none; } a:hover { text-decoration: underline; }
table { border-collapse: collapse; font-size: .9em; } \
th, td { border: 1px solid #cfd8dc; padding: .3em .6em; text-align: left; }
th { background: #eceff1; } table.sortable th { cursor: pointer; user-select: none; }
th[data-order=asc]::after { content: " \\25B2"; } th[data-order=desc]::after { content: " \\25BC"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f5f5f5; border: 1px solid #e0e0e0; padding: .6em; \
overflow: auto; max-height: 32em; font-size: .85em; }
.badge { display: inline-block; padding: .1em .5em; border-radius: .8em; \
border: 1px solid; font-size: .85em; white-space: nowrap; }
.meta { color: #546e7a; font-size: .9em; }
.scroll { overflow-x: auto; max-width: 100%; }
.failure { border: 2px solid #c62828; background: #fff5f5; padding: .2em 1em 1em; border-radius: .4em; }
.legend span { margin-right: 1em; }
img.plot { max-width: min(100%, 900px); height: auto; } figure svg { max-width: 100%; height: auto; }
details.attempt { margin: .5em 0; } details.attempt > summary { cursor: pointer; }
"""

_SORT_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(th => th.addEventListener("click", () => {
  const table = th.closest("table"), body = table.tBodies[0], column = th.cellIndex;
  const ascending = th.dataset.order !== "asc";
  table.querySelectorAll("th").forEach(other => delete other.dataset.order);
  th.dataset.order = ascending ? "asc" : "desc";
  const value = row => {
    const cell = row.cells[column], raw = cell.dataset.sort ?? cell.textContent.trim(), number = Number(raw);
    return raw !== "" && !isNaN(number) ? number : raw;
  };
  const compare = (a, b) => typeof a === typeof b ? (a < b ? -1 : a > b ? 1 : 0) \
: (typeof a === "number" ? -1 : 1);
  [...body.rows].sort((a, b) => (ascending ? 1 : -1) * compare(value(a), value(b)))\
.forEach(row => body.appendChild(row));
}));
"""


def write(report: Report, out: Path, refresh_s: int | None = None) -> Path:
    """Write the report under `out`; returns the index page. With `refresh_s`, pages reload
    themselves that often (`marinbuild serve` regenerates them meanwhile)."""
    steps_dir = out / STEPS_DIR
    steps_dir.mkdir(parents=True, exist_ok=True)
    pages = {steps_dir / step_file(step.label): _step_page(report, step) for step in report.steps.values()}
    for old in steps_dir.glob("*.html"):  # pages of steps no longer selected
        if old not in pages:
            old.unlink()
    index = out / "index.html"
    pages[index] = _index_page(report)
    for path, (title, body) in pages.items():
        path.write_text(_page(title, body, refresh_s))
    return index


def step_file(label: str) -> str:
    """A file name per label: readable, and distinct even where two labels read alike."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", label.lstrip("/")).strip("_")
    return f"{readable}-{digest_bytes(label.encode())[:6]}.html"


# -- building blocks ------------------------------------------------------------------------


def _page(title: str, body: str, refresh_s: int | None) -> str:
    refresh = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{refresh}'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>\n<body>\n{body}\n"
        f"<script>{_SORT_SCRIPT}</script>\n</body></html>\n"
    )


def _badge(status: StepStatus) -> str:
    fill, stroke = diagram.COLOURS[status]
    return f'<span class="badge status" style="background:{fill};border-color:{stroke}">{escape(status.value)}</span>'


def _link(label: str, prefix: str) -> str:
    return f'<a href="{prefix}{step_file(label)}">{escape(label)}</a>'


def _number(value: Any) -> str:
    """Plain text (not escaped): ints with separators, floats to 4 significant digits."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.4g}"


def _cell(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'<td class="num" data-sort="{value}">{_number(value)}</td>'
    return f"<td>{escape('' if value is None else str(value))}</td>"


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], table_id: str = "", sortable: bool = False) -> str:
    attributes = (f' id="{table_id}"' if table_id else "") + (' class="sortable"' if sortable else "")
    head = "".join(f"<th>{escape(header)}</th>" for header in headers)
    body = "\n".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return (
        f'<div class="scroll"><table{attributes}><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table></div>'
    )


def _json_block(value: Any) -> str:
    return f"<pre>{escape(json.dumps(value, indent=2, sort_keys=True, default=str))}</pre>"


def _image(found: OutputFile) -> str:
    mime = _MIME[Path(found.path).suffix]
    data = base64.b64encode(found.data).decode()
    return (
        f'<figure><img class="plot" alt="{escape(found.path)}" src="data:{mime};base64,{data}">'
        f'<figcaption class="meta">{escape(found.path)}</figcaption></figure>'
    )


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


# -- runs: hyperparameters, final metrics, curves --------------------------------------------


# What the attempt that built a run measured (`ctx.measure`), shown in the runs table.
MEASURED_COLUMNS = ("tokens_per_s", "wall_time_s")


def final_metrics(report: Report, step: StepReport) -> dict[str, Any]:
    """The run's summary.json numbers (else the last value of each loss in metrics.jsonl),
    the speed its building attempt measured, then the numbers of each evaluation built on
    it, named by what it evaluated as `marinbuild compare` names them (`eval.tokens.loss`:
    `evaluation_columns`); of two evaluations of the same data, the first one's."""
    summary = step.json_file(SUMMARY_FILE)
    found: dict[str, Any] = {}
    if isinstance(summary, dict):
        found.update((name, value) for name, value in summary.items() if _is_number(value))
    else:
        for curve in plots.loss_curves(step.label, step.metrics_rows):
            found[curve.metric] = curve.values[-1]
    measured = step.entry.provenance.get("measured", {}) if step.entry is not None else {}
    found.update((name, measured[name]) for name in MEASURED_COLUMNS if _is_number(measured.get(name)))
    for dependent in step.dependents:
        evaluation = report.steps[dependent]
        rule = evaluation.target.rule
        if rule.metrics_file is None or step.label in {label for label, _at in evaluation.target.steps_read().values()}:
            continue  # no metrics, or it evaluates a checkpoint the run kept, not the run
        for name, value in evaluation_columns(rule, dependent, evaluation.json_file(rule.metrics_file)).items():
            found.setdefault(name, value)
    return found


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _shared_note(differences: Differences, runs: int) -> str:
    """What every run has alike, said once above the table: the hyperparameters, and how many
    attributes upstream (listed when the line is clicked)."""
    parts = []
    if differences.shared:
        common = ", ".join(f"{name} = {_number(value)}" for name, value in differences.shared.items())
        label = "Common to every run" if runs > 1 else "Hyperparameters"
        parts.append(f'<p id="shared-hyperparameters">{label}: {escape(common)}</p>')
    upstream = differences.shared_upstream
    if upstream:
        listed = "".join(f"<li>{escape(name)} = {escape(_number(value))}</li>" for name, value in upstream.items())
        parts.append(
            f'<details id="shared-upstream"><summary>{len(upstream)} attributes of the '
            f"{differences.upstream_targets} targets upstream are the same in every run</summary>"
            f"<ul>{listed}</ul></details>"
        )
    return "".join(parts)


def _runs_section(report: Report) -> str:
    runs, differences = report.runs, report.differences
    if not runs or differences is None:
        return (
            '<section id="runs"><h2>Training runs</h2>'
            '<p class="meta">No built step of the selection has a metrics.jsonl.</p></section>'
        )
    metrics = {step.label: final_metrics(report, step) for step in runs}
    metric_names = list(dict.fromkeys(name for found in metrics.values() for name in found))
    rows = [
        [f"<td>{_link(step.label, STEPS_DIR + '/')}</td>", f"<td>{_badge(step.status)}</td>"]
        + [_cell(found.get(name)) for name in differences.columns]
        + [_cell(metrics[step.label].get(name)) for name in metric_names]
        for step, found in zip(runs, differences.rows)
    ]
    table = _table(["run", "status", *differences.columns, *metric_names], rows, "runs-table", sortable=True)
    one_package = len({step.target.label.package for step in runs}) == 1
    curves = [
        curve
        for step in runs
        for curve in plots.loss_curves(f":{step.target.label.name}" if one_package else step.label, step.metrics_rows)
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
        + f"{notes}{table}<h3>Loss curves</h3>{figure}</section>"
    )


# -- scaling-law fits --------------------------------------------------------------------------


def _interval(value: Any, interval: Any) -> str:
    text = _number(value)
    if isinstance(interval, list) and len(interval) == 2:
        text += f" [{_number(interval[0])}, {_number(interval[1])}]"
    return text


def _fit_block(step: StepReport, prefix: str) -> str:
    fit = step.fit or {}
    forecasts = [
        [
            _cell(item.get("budget")),
            f"<td>{escape(_interval(item.get('optimal_tokens'), item.get('optimal_tokens_ci')))}</td>",
            _cell(item.get("optimal_params")),
            f"<td>{escape(_interval(item.get('loss'), item.get('loss_ci')))}</td>",
        ]
        for item in fit.get("forecasts", [])
    ]
    parts = [f"<h3>{_link(step.label, prefix)}</h3>", "".join(_image(found) for found in step.plots)]
    parts.append(
        "<h4>Forecasts</h4>"
        + _table(
            ["budget (FLOPs)", "optimal tokens [95% CI]", "optimal params", "loss [95% CI]"],
            forecasts,
            "forecast-table",
        )
    )
    tokens_law, loss_law = fit.get("tokens_law", {}), fit.get("loss_law", {})
    laws = [
        f"D* = A·C^α: α = {_interval(tokens_law.get('alpha'), tokens_law.get('alpha_ci'))}, "
        f"A = {_interval(tokens_law.get('A'), tokens_law.get('A_ci'))}",
        f"L*(C) = E + B·C^-β: E = {_interval(loss_law.get('E'), loss_law.get('E_ci'))}, "
        f"B = {_interval(loss_law.get('B'), loss_law.get('B_ci'))}, "
        f"β = {_interval(loss_law.get('beta'), loss_law.get('beta_ci'))}",
    ]
    parts.append("<ul>" + "".join(f"<li>{escape(line)}</li>" for line in laws) + "</ul>")
    budgets = [
        [
            _cell(item.get(name))
            for name in ("budget", "compute", "optimal_tokens", "optimal_loss", "minimum_inside", "used")
        ]
        for item in fit.get("budgets", [])
    ]
    if budgets:
        headers = [
            "budget",
            "measured compute",
            "optimal tokens",
            "optimal loss",
            "minimum inside the sweep",
            "in the laws",
        ]
        parts.append("<h4>Per budget (isoFLOP parabolas)</h4>" + _table(headers, budgets))
    held_out = fit.get("held_out", [])
    if held_out:
        rows = [
            [
                _cell(item.get(name))
                for name in ("label", "budget", "loss", "forecast_loss", "relative_error", "within_ci")
            ]
            for item in held_out
        ]
        parts.append(
            "<h4>Held-out runs</h4>"
            + _table(["run", "budget", "loss", "forecast loss", "relative error", "within CI"], rows, "held-out-table")
        )
    if fit.get("warnings"):
        parts.append(
            "<ul>" + "".join(f"<li>warning: {escape(str(warning))}</li>" for warning in fit["warnings"]) + "</ul>"
        )
    return "\n".join(parts)


def _scaling_section(report: Report) -> str:
    fits = report.fits
    if not fits:
        return ""
    return (
        '<section id="scaling"><h2>Scaling laws</h2>'
        + "".join(_fit_block(step, STEPS_DIR + "/") for step in fits)
        + "</section>"
    )


def _plots_section(report: Report) -> str:
    fitted = {step.label for step in report.fits}
    shown = [step for step in report.steps.values() if step.plots and step.label not in fitted]
    if not shown:
        return ""
    blocks = "".join(
        f"<h3>{_link(step.label, STEPS_DIR + '/')}</h3>" + "".join(_image(found) for found in step.plots)
        for step in shown
    )
    return f'<section id="plots"><h2>Plots</h2>{blocks}</section>'


# -- failures ----------------------------------------------------------------------------------


def _attempt_block(view: AttemptView, number: int, total: int) -> str:
    record = view.record
    failed = record.status.value != "succeeded"
    facts = [
        ("status", record.status.value),
        ("started", record.started),
        ("finished", record.finished),
        ("duration", _duration(record.duration_s)),
        ("host", record.host),
        ("user", record.user),
        ("exit status", record.exit_status),
        ("error", record.error),
        ("key", record.key),
        ("invocation", record.invocation),
    ]
    rows = "".join(
        f"<tr><th>{name}</th><td>{escape(str(value))}</td></tr>" for name, value in facts if value not in (None, "")
    )
    log = (
        f'<pre class="log">{escape(view.log_tail)}</pre>'
        if view.log_tail is not None
        else '<p class="meta">no log stored</p>'
    )
    return (
        f'<details class="attempt attempt-{record.status.value}" '
        f'id="attempt-{escape(record.attempt_id)}"{" open" if failed else ""}>'
        f"<summary>attempt {number} of {total}: <b>{escape(record.status.value)}</b>, {escape(record.started or '')}, "
        f"{escape(_duration(record.duration_s))} on {escape(record.host or '?')}</summary>"
        f'<table>{rows}</table><p class="meta">log tail:</p>{log}'
        f"<details><summary>the whole record (provenance)</summary>{_json_block(record.to_json())}</details></details>"
    )


def _failure_section(report: Report) -> str:
    if not report.failures:
        return ""
    parts = ['<section id="failures" class="failure"><h2>Failures</h2>']
    for failure in report.failures:
        record = failure.attempt.record
        parts.append(f'<h3 class="failed-step">{_link(failure.step.label, STEPS_DIR + "/")} failed</h3>')
        build = failure.invocation
        parts.append(
            f'<p class="meta">{escape(record.started or "?")} on {escape(record.host or "?")}, '
            f"after {escape(_duration(record.duration_s))}"
            + (
                f"; build {escape(build.invocation_id)} of {escape(' '.join(build.patterns))} "
                f"by {escape(build.user or '?')}"
                if build
                else ""
            )
            + "</p>"
        )
        parts.append(f'<p class="error"><b>error:</b> {escape(record.error or "(none recorded)")}</p>')
        if failure.attempt.log_tail is not None:
            parts.append(f'<p class="meta">log tail:</p><pre class="log">{escape(failure.attempt.log_tail)}</pre>')
        if failure.skipped:
            items = "".join(
                f"<li>{_link(label, STEPS_DIR + '/')}: {escape(reason or 'skipped')}</li>"
                for label, reason in failure.skipped
            )
            parts.append(f'<p>Skipped by that build:</p><ul class="skipped">{items}</ul>')
    parts.append("</section>")
    return "\n".join(parts)


# -- pages -------------------------------------------------------------------------------------


def _graph_section(report: Report) -> str:
    packages = {step.target.label.package for step in report.steps.values()}
    nodes = [
        diagram.Node(
            label=step.label,
            text=step.target.label.name,
            detail=step.kind if len(packages) == 1 else f"{step.kind} · //{step.target.label.package}",
            status=step.status,
            href=f"{STEPS_DIR}/{step_file(step.label)}",
        )
        for step in report.steps.values()
    ]
    legend = "".join(f"<span>{_badge(status)} {count}</span>" for status, count in report.counts().items())
    svg = diagram.render(nodes, {step.label: step.deps for step in report.steps.values()})
    return f'<section id="graph"><h2>Graph</h2><p class="legend">{legend}</p><div class="scroll">{svg}</div></section>'


def _last_attempt(step: StepReport) -> tuple[AttemptRecord | None, str]:
    """The newest attempt at the step's current key, and how it ended; where there is none,
    the newest at another key, said so: an older recipe's failure is not this output's."""
    at_key = [view.record for view in step.attempts if view.record.key == step.key]
    if at_key:
        return at_key[-1], at_key[-1].status.value
    if not step.attempts:
        return None, ""
    last = step.attempts[-1].record
    return last, f"{last.status.value}, at another key ({last.key[:12]})"


def _steps_section(report: Report) -> str:
    rows = []
    for step in report.steps.values():
        last, outcome = _last_attempt(step)
        rows.append(
            [
                f"<td>{_link(step.label, STEPS_DIR + '/')}</td>",
                f"<td>{escape(step.kind)}</td>",
                f'<td data-sort="{step.status.value}">{_badge(step.status)}</td>',
                f"<td><code>{escape((step.key or '')[:12])}</code></td>",
                _cell(len(step.attempts)),
                f"<td>{escape(outcome)}</td>",
                f'<td class="num" data-sort="{last.duration_s if last and last.duration_s is not None else ""}">'
                f"{escape(_duration(last.duration_s) if last else '')}</td>",
                f"<td>{escape(last.host or '' if last else '')}</td>",
            ]
        )
    headers = ["step", "rule", "status", "key", "attempts", "last attempt", "duration", "host"]
    return f'<section id="steps"><h2>Steps</h2>{_table(headers, rows, "steps-table", sortable=True)}</section>'


def _index_page(report: Report) -> tuple[str, str]:
    title = f"marinbuild report: {' '.join(report.patterns)}"
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="meta">store {escape(report.store_url)} · workspace {escape(report.workspace)} '
        f"· generated {generated}</p>",
        _failure_section(report),
        _graph_section(report),
        _runs_section(report),
        _scaling_section(report),
        _plots_section(report),
        _steps_section(report),
    ]
    return title, "\n".join(part for part in body if part)


def _pin_text(description: dict[str, Any]) -> str:
    pin = description["pin"]
    where = f"<code>{escape(description['url'])}</code>"
    if pin is None:
        return f"{where}, not pinned"
    state = "" if description["current"] else " — <strong>changed since</strong>"
    return (
        f"{where}: {pin['objects']:,} objects, {human_size(pin['bytes'])}, pinned {escape(pin['pinned'])} "
        f"by {escape(pin['by'])} (digest <code>{escape(pin['digest'][:16])}</code>){state}"
    )


def _outputs_block(step: StepReport) -> str:
    """The manifest summed up by top-level file or directory, then every file (folded)."""
    if step.pin is not None:
        return '<p class="meta">An external artifact, read where it lives (nothing copied).</p>'
    if step.entry is None:
        return (
            f'<p class="meta">No output under the current key ({escape(step.result.reason or step.status.value)}).</p>'
        )
    manifest = step.entry.manifest
    groups: dict[str, list[int]] = {}
    for item in manifest.files:
        top, _, rest = item.path.partition("/")
        counted = groups.setdefault(top + "/" if rest else top, [0, 0])
        counted[0] += 1
        counted[1] += item.size
    summary = [[f"<td>{escape(name)}</td>", _cell(files), _cell(size)] for name, (files, size) in groups.items()]
    listed = manifest.files[:_MAX_FILES_LISTED]
    every = [
        [f"<td>{escape(item.path)}</td>", _cell(item.size), f"<td><code>{escape(item.digest[:16])}</code></td>"]
        for item in listed
    ]
    more = f" (the first {len(listed)})" if len(listed) < len(manifest.files) else ""
    parts = [
        f"<p>{len(manifest.files):,} files, {human_size(manifest.total_bytes)}; "
        f"tree digest <code>{escape(step.entry.tree_digest[:16])}</code></p>",
        _table(["output", "files", "bytes"], summary, "outputs-table"),
        f"<details><summary>every file{more}</summary>{_table(['file', 'bytes', 'blake3'], every)}</details>",
    ]
    if step.unreadable:
        parts.append(
            '<p class="error">Did not match the manifest when read for this report: '
            f"{escape(', '.join(step.unreadable))}</p>"
        )
    return "\n".join(parts)


def _data_block(counts: DataCounts) -> str:
    """A data step's documents per split, each filter's counts in chain order, and its skips."""
    splits = ", ".join(f"{escape(split)} {count:,}" for split, count in counts.documents)
    parts = [f"<p>{counts.total_documents:,} documents ({splits}).</p>"]
    if counts.filters:
        rows = [
            [
                f"<td>{escape(item.name)}</td>",
                _cell(item.seen),
                _cell(item.kept),
                _cell(None if item.kept_share is None else round(100 * item.kept_share, 1)),
                _cell(item.rejected),
                _cell(", ".join(f"{reason} {count:,}" for reason, count in item.reasons)),
            ]
            for item in counts.filters
        ]
        parts += [
            '<p class="meta">Filters in chain order: each sees what those before it kept.</p>',
            _table(["filter", "seen", "kept", "kept %", "rejected", "rejected by reason"], rows, "filters-table"),
        ]
    if counts.skipped:
        rows = [[_cell(item.reason), _cell(item.count), _cell(item.first)] for item in counts.skipped]
        parts += [
            f'<p class="meta">{counts.total_skipped:,} inputs passed over, by reason.</p>',
            _table(["skipped", "count", "first met at"], rows, "skipped-table"),
        ]
    return "\n".join(parts)


def _distributions_block(cuts: Sequence[Distribution]) -> str:
    """What a step cut on: a histogram each, its threshold a line, its quantiles below it."""
    parts = ['<p class="meta">What the step cut on, over every document: the threshold is the dashed line.</p>']
    for cut in cuts:
        kept = cut.cut()
        caption = f"{cut.name}: {cut.summary()}" + (f"; {kept}" if kept else "")
        svg = plots.histogram_svg(cut)
        parts.append(f'<figure class="distribution">{svg}<figcaption>{escape(caption)}</figcaption></figure>')
    return "\n".join(parts)


def _checkpoint_facts(step: StepReport) -> list[tuple[str, str]]:
    """The checkpoints a training keeps (each an entry of its own, by key), and the one a
    target reads instead of a whole output (docs/checkpoints.md)."""
    target, facts = step.target, []
    kept = target.attrs[target.rule.keeps_checkpoints] if target.rule.keeps_checkpoints else None
    if kept:
        shown = [
            f"step {at}" + (f" <code>{escape(checkpoint_key(step.key, at)[:12])}</code>" if step.key else "")
            for at in kept
        ]
        facts.append(("kept checkpoints", ", ".join(shown)))
    for attr, (label, at) in target.steps_read().items():
        facts.append((escape(attr), f"the checkpoint {_link(label, '')} keeps at step {at}"))
    return facts


def _step_page(report: Report, step: StepReport) -> tuple[str, str]:
    target = step.target
    facts = [
        ("rule", escape(step.kind)),
        ("status", _badge(step.status) + (f" — {escape(step.result.reason)}" if step.result.reason else "")),
        ("key", f"<code>{escape(step.key or 'pending: a dependency is not built')}</code>"),
        ("declared at", escape(str(target.location))),
        ("depends on", ", ".join(_link(dep, "") for dep in step.deps) or "—"),
        ("used by", ", ".join(_link(dependent, "") for dependent in step.dependents) or "—"),
    ]
    if step.last_build is not None:
        built = step.last_build
        elsewhere = f", at another key ({built.key[:12]})" if built.key and built.key != step.key else ""
        reason = f": {step.last_build_reason}" if step.last_build_reason else ""
        facts.append(("last build", escape(built.status + elsewhere + reason)))
    if step.pin is not None:
        facts.append(("external artifact", _pin_text(step.pin)))
    facts += _checkpoint_facts(step)
    if step.mirrored is not None:
        facts.append(("in a mirror", escape(step.mirrored.elsewhere())))
    if step.copied is not None:
        copied = step.copied
        facts.append(
            (
                "copied",
                escape(
                    f"from {copied['from']} ({copied['from_region']} → {copied['to_region']}), "
                    f"{human_size(copied['bytes'])}, {copied['copied']} by {copied['by']}"
                ),
            )
        )
    if target.attrs.get("description"):
        facts.append(("description", escape(target.attrs["description"])))
    body = [
        '<p><a href="../index.html">← report</a></p>',
        f"<h1>{escape(step.label)}</h1>",
        "<table>" + "".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in facts) + "</table>",
    ]
    curves = plots.loss_curves(step.label, step.metrics_rows)
    if curves:
        body += ['<h2>Loss curves</h2><figure id="loss-curves">', plots.curves_svg(curves, step.label), "</figure>"]
    summary = step.json_file(SUMMARY_FILE)
    counts = data_counts(summary) if isinstance(summary, dict) else None
    if counts is not None:
        body += ['<h2 id="documents">Documents</h2>', _data_block(counts)]
    cuts = distributions(summary) if isinstance(summary, dict) else None
    if cuts is not None:
        body += ['<h2 id="distributions">Distributions</h2>', _distributions_block(cuts)]
    if isinstance(summary, dict):
        body += [f"<h3>{SUMMARY_FILE}</h3>", _json_block(summary)]
    if step.fit is not None:
        body += ["<h2>Scaling law</h2>", _fit_block(step, "")]
    elif step.plots:
        body += ["<h2>Plots</h2>", "".join(_image(found) for found in step.plots)]
    total = len(step.attempts)
    body.append(f'<h2 id="attempts">Attempts ({total})</h2>')
    body += [_attempt_block(view, number, total) for number, view in reversed(list(enumerate(step.attempts, start=1)))]
    if not step.attempts:
        body.append('<p class="meta">Never attempted in this store.</p>')
    body += ["<h2>Recipe</h2>", _json_block(target.map_labels(str, identity_only=True))]
    if step.entry is not None:
        body += [
            "<details><summary>the recipe as keyed (with input digests)</summary>",
            _json_block(step.entry.recipe),
            "</details>",
            "<h2>Provenance</h2>",
            _json_block(step.entry.provenance),
        ]
    body += ["<h2>Outputs</h2>", _outputs_block(step)]
    return step.label, "\n".join(body)
