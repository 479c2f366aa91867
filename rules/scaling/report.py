"""The report's section of a scaling-law fit (`fit_scaling_law`'s `ReportSection`): its plots,
the forecasts with their confidence intervals, the two laws, the isoFLOP parabola of each
budget and the check of the held-out runs, all read from fit.json (docs/delphi.md).

Written with the rules API's HTML blocks, so it reads like the rest of the report; the
report imports this module only when it writes a page with a fit on it.
"""

from __future__ import annotations

from html import escape
from typing import Any

from marinbuild.targets.html_blocks import cell, image, number, table
from marinbuild.targets.outputs import StepOutputs
from rules.scaling.constants import FIT_FILE


def fit_section(step: StepOutputs) -> str | None:
    """The fit of `step`, or None if it wrote no fit.json with forecasts."""
    fit = step.json(FIT_FILE)
    if not isinstance(fit, dict) or not isinstance(fit.get("forecasts"), list):
        return None
    parts = [f'<h3><a href="{step.link}">{escape(step.label)}</a></h3>', "".join(image(*plot) for plot in step.plots)]
    parts.append("<h4>Forecasts</h4>" + _forecasts(fit["forecasts"]))
    parts.append("<ul>" + "".join(f"<li>{escape(line)}</li>" for line in _laws(fit)) + "</ul>")
    budgets = [
        [
            cell(item.get(name))
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
        parts.append("<h4>Per budget (isoFLOP parabolas)</h4>" + table(headers, budgets))
    held_out = [
        [cell(item.get(name)) for name in ("label", "budget", "loss", "forecast_loss", "relative_error", "within_ci")]
        for item in fit.get("held_out", [])
    ]
    if held_out:
        headers = ["run", "budget", "loss", "forecast loss", "relative error", "within CI"]
        parts.append("<h4>Held-out runs</h4>" + table(headers, held_out, "held-out-table"))
    if fit.get("warnings"):
        parts.append(
            "<ul>" + "".join(f"<li>warning: {escape(str(warning))}</li>" for warning in fit["warnings"]) + "</ul>"
        )
    return "\n".join(parts)


def _forecasts(forecasts: list[dict[str, Any]]) -> str:
    rows = [
        [
            cell(item.get("budget")),
            f"<td>{escape(_interval(item.get('optimal_tokens'), item.get('optimal_tokens_ci')))}</td>",
            cell(item.get("optimal_params")),
            f"<td>{escape(_interval(item.get('loss'), item.get('loss_ci')))}</td>",
        ]
        for item in forecasts
    ]
    headers = ["budget (FLOPs)", "optimal tokens [95% CI]", "optimal params", "loss [95% CI]"]
    return table(headers, rows, "forecast-table")


def _laws(fit: dict[str, Any]) -> list[str]:
    """The compute-optimal token law and the loss law, each parameter with its interval."""
    tokens_law, loss_law = fit.get("tokens_law", {}), fit.get("loss_law", {})
    return [
        f"D* = A·C^α: α = {_interval(tokens_law.get('alpha'), tokens_law.get('alpha_ci'))}, "
        f"A = {_interval(tokens_law.get('A'), tokens_law.get('A_ci'))}",
        f"L*(C) = E + B·C^-β: E = {_interval(loss_law.get('E'), loss_law.get('E_ci'))}, "
        f"B = {_interval(loss_law.get('B'), loss_law.get('B_ci'))}, "
        f"β = {_interval(loss_law.get('beta'), loss_law.get('beta_ci'))}",
    ]


def _interval(value: Any, interval: Any) -> str:
    text = number(value)
    if isinstance(interval, list) and len(interval) == 2:
        text += f" [{number(interval[0])}, {number(interval[1])}]"
    return text
