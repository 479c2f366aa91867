"""The report's index page: the failures first, the graph coloured by status, the training
runs (runs.py), each rule's own section (a scaling fit's laws and forecasts), the plots of
the other steps, and a table of every step with its last attempt.
"""

from __future__ import annotations

import time
from html import escape

from marinbuild.provenance import AttemptRecord
from marinbuild.report import diagram
from marinbuild.report.blocks import STEPS_DIR, badge, duration, link, rule_section, step_file
from marinbuild.report.collect import Report, StepReport
from marinbuild.report.runs import runs_section
from marinbuild.targets.html_blocks import cell, image, table
from marinbuild.targets.outputs import ReportSection


def index_page(report: Report) -> tuple[str, str]:
    title = f"marinbuild report: {' '.join(report.patterns)}"
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    sections = _rule_sections(report)
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="meta">store {escape(report.store_url)} · workspace {escape(report.workspace)} '
        f"· generated {generated}</p>",
        _failure_section(report),
        _graph_section(report),
        runs_section(report),
        *(
            f'<section id="{section.index_id}"><h2>{escape(section.index_title)}</h2>'
            f"{''.join(blocks.values())}</section>"
            for section, blocks in sections.items()
        ),
        _plots_section(report, {label for blocks in sections.values() for label in blocks}),
        _steps_section(report),
    ]
    return title, "\n".join(part for part in body if part)


def _rule_sections(report: Report) -> dict[ReportSection, dict[str, str]]:
    """Per rule section declared, {label: its HTML} of each step that has one to show."""
    found: dict[ReportSection, dict[str, str]] = {}
    for step in report.steps.values():
        html = rule_section(step, STEPS_DIR + "/")
        if html is not None:
            found.setdefault(step.target.rule.report_section, {})[step.label] = html  # type: ignore[index]
    return found


def _plots_section(report: Report, shown_elsewhere: set[str]) -> str:
    """The plots of the steps whose rule's own section does not show them."""
    shown = [step for step in report.steps.values() if step.plots and step.label not in shown_elsewhere]
    if not shown:
        return ""
    blocks = "".join(
        f"<h3>{link(step.label, STEPS_DIR + '/')}</h3>" + "".join(image(found.path, found.data) for found in step.plots)
        for step in shown
    )
    return f'<section id="plots"><h2>Plots</h2>{blocks}</section>'


def _failure_section(report: Report) -> str:
    if not report.failures:
        return ""
    parts = ['<section id="failures" class="failure"><h2>Failures</h2>']
    for failure in report.failures:
        record = failure.attempt.record
        parts.append(f'<h3 class="failed-step">{link(failure.step.label, STEPS_DIR + "/")} failed</h3>')
        build = failure.invocation
        parts.append(
            f'<p class="meta">{escape(record.started or "?")} on {escape(record.where(short=True))}, '
            f"after {escape(duration(record.duration_s))}"
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
                f"<li>{link(label, STEPS_DIR + '/')}: {escape(reason or 'skipped')}</li>"
                for label, reason in failure.skipped
            )
            parts.append(f'<p>Skipped by that build:</p><ul class="skipped">{items}</ul>')
    parts.append("</section>")
    return "\n".join(parts)


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
    legend = "".join(f"<span>{badge(status)} {count}</span>" for status, count in report.counts().items())
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
                f"<td>{link(step.label, STEPS_DIR + '/')}</td>",
                f"<td>{escape(step.kind)}</td>",
                f'<td data-sort="{step.status.value}">{badge(step.status)}</td>',
                f"<td><code>{escape((step.key or '')[:12])}</code></td>",
                cell(len(step.attempts)),
                f"<td>{escape(outcome)}</td>",
                f'<td class="num" data-sort="{last.duration_s if last and last.duration_s is not None else ""}">'
                f"{escape(duration(last.duration_s) if last else '')}</td>",
                f"<td>{escape(last.where(short=True) if last else '')}</td>",
            ]
        )
    headers = ["step", "rule", "status", "key", "attempts", "last attempt", "duration", "host"]
    return f'<section id="steps"><h2>Steps</h2>{table(headers, rows, "steps-table", sortable=True)}</section>'
