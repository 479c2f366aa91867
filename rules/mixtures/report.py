"""The report's sections of a mixture study (`ReportSection`s of mixture_fit and
mixture_check): the law a swarm fitted, how well it predicts a run it has not seen, the
mixture it proposes; then the mixture page, the proposal and the references trained at each
scale against what the law predicted, and whether the proposal's advantage holds.

Read from fit.json and validation.json alone, written with the rules API's HTML blocks so
that the sections read like the rest of the report; every name from the files is escaped.
The report imports this module only when it writes a page with a mixture study on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from marinbuild.targets.html_blocks import cell, image, number, table
from marinbuild.targets.outputs import StepOutputs
from rules.mixtures.constants import CHECK_FILE, FIT_FILE

ERRORS = ("rmse", "mean_relative_error", "max_relative_error")  # a regression's leave-one-out errors


def _text(value: Any) -> str:
    """A value from the files as HTML text: a number as the report writes numbers, escaped."""
    return escape(number(value))


def _role(role: Any) -> str:
    return escape(str(role).replace("_", " "))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _heading(step: StepOutputs) -> str:
    return f'<h3><a href="{step.link}">{escape(step.label)}</a></h3>' + "".join(image(*plot) for plot in step.plots)


def _weights(weights: Any, names: Sequence[str]) -> list[str]:
    """A cell per source: its weight in `weights` ({name: weight}), empty where it has none."""
    found = weights if isinstance(weights, Mapping) else {}
    return [cell(found.get(name)) for name in names]


def _target(target: Any) -> str:
    if not isinstance(target, Mapping) or not target:
        return _text(target)
    if len(target) == 1:
        return _text(next(iter(target)))
    return "the weighted mean of " + ", ".join(f"{_text(name)} ({_text(weight)})" for name, weight in target.items())


# -- fit_section -------------------------------------------------------------------------------


def _is_fit(fit: Any) -> bool:
    return (
        isinstance(fit, dict)
        and isinstance(fit.get("proposal"), dict)
        and isinstance(fit.get("sources"), list)
        and isinstance(fit.get("runs"), list)
        and all(isinstance(run, dict) for run in fit["runs"])
    )


def fit_section(step: StepOutputs) -> str | None:
    """The law of `step`, its leave-one-out error beside the other regressions', its proposal
    beside the references, and the swarm's runs; None without a fit.json holding a proposal."""
    fit = step.json(FIT_FILE)
    if not _is_fit(fit):
        return None
    names = [str(name) for name in fit["sources"]]
    tokens = fit.get("swarm_tokens")
    return "\n".join(
        [
            _heading(step),
            f"<p>Target: {_target(fit.get('target'))}. Regression <b>{_text(fit.get('regression'))}</b>, fitted on "
            f"{len(fit['runs'])} swarm runs" + (f" of {_text(tokens)} tokens" if _is_number(tokens) else "") + ".</p>",
            "<h4>The law</h4>" + _law(fit.get("parameters"), names),
            "<h4>Leave-one-out error by regression</h4>" + _compared(fit),
            "<h4>The proposal</h4>" + _proposal(fit) + _mixtures(fit, names) + _repetition(fit["proposal"], fit, names),
            "<h4>The swarm's runs</h4>" + _runs(fit["runs"], names),
        ]
    )


def _parameter(value: Any, names: Sequence[str]) -> str:
    """A parameter as text: a list with a number per source by source, a dict by key."""
    if isinstance(value, list) and len(value) == len(names):
        return ", ".join(f"{name}: {number(item)}" for name, item in zip(names, value))
    if isinstance(value, Mapping):
        return ", ".join(f"{key}: {number(item)}" for key, item in value.items())
    return number(value)


def _law(parameters: Any, names: Sequence[str]) -> str:
    """The fitted parameters of each target set's regression (fit.json's `parameters`)."""
    if not isinstance(parameters, Mapping):
        return "<p>No parameters.</p>"
    rows = [
        [cell(name), cell(key), f"<td>{escape(_parameter(value, names))}</td>"]
        for name, fitted in parameters.items()
        if isinstance(fitted, Mapping)
        for key, value in fitted.items()
    ]
    return table(["target set", "parameter", "value"], rows, "mixture-law-table")


def _compared(fit: Mapping[str, Any]) -> str:
    """Each regression's leave-one-out errors on the same runs, the fitted one marked."""
    compared = fit.get("compared")
    if not isinstance(compared, Mapping):
        compared = {fit.get("regression"): fit.get("loo")}
    rows = [
        [f"<td>{escape(str(kind))}{' (fitted)' if kind == fit.get('regression') else ''}</td>"]
        + [cell(errors.get(name)) for name in ERRORS]
        for kind, errors in compared.items()
        if isinstance(errors, Mapping)
    ]
    headers = ["regression", "rmse", "mean relative error", "max relative error"]
    return table(headers, rows, "mixture-loo-table")


def _proposal(fit: Mapping[str, Any]) -> str:
    proposal = fit["proposal"]
    interval = proposal.get("interval")
    shown = (
        f" [{_text(interval[0])}, {_text(interval[1])}] (bootstrap interval)"
        if isinstance(interval, list) and len(interval) == 2
        else ""
    )
    return (
        f"<p>Predicted target loss {_text(proposal.get('predicted'))}{shown}, for a run of "
        f"{_text(fit.get('run_tokens'))} tokens repeating no source more than {_text(fit.get('max_repetition'))} "
        f"times (KL weight towards the prior {_text(fit.get('kl_weight'))}).</p>"
    )


def _mixtures(fit: Mapping[str, Any], names: Sequence[str]) -> str:
    """The proposal beside the references the fit names: weights, predicted loss, and the
    best run's actual one."""
    best = fit.get("best_run") if isinstance(fit.get("best_run"), Mapping) else {}
    mixtures = [
        ("proposal", fit["proposal"]),
        (f"best run ({best.get('run')})", best),
        ("prior", fit.get("prior")),
        ("uniform", fit.get("uniform")),
    ]
    rows = [
        [cell(label), *_weights(found.get("weights"), names), cell(found.get("predicted")), cell(found.get("loss"))]
        for label, found in mixtures
        if isinstance(found, Mapping) and found
    ]
    return table(["mixture", *names, "predicted loss", "actual loss"], rows, "mixture-table")


def _repetition(proposal: Mapping[str, Any], fit: Mapping[str, Any], names: Sequence[str]) -> str:
    """How many times a run of the proposal repeats each source, against the cap."""
    rows = [
        [cell(label), *_weights(found, names)]
        for label, found in (("repetition", proposal.get("repetition")), ("cap", fit.get("caps")))
        if isinstance(found, Mapping)
    ]
    return table(["the proposal's", *names], rows) if rows else ""


def _runs(runs: Sequence[Mapping[str, Any]], names: Sequence[str]) -> str:
    rows = [
        [cell(run.get("run"))]
        + [cell(weight) for weight in (run.get("weights") if isinstance(run.get("weights"), list) else [])]
        + [cell(run.get(name)) for name in ("loss", "predicted", "loo_predicted")]
        for run in runs
    ]
    headers = ["run", *names, "loss", "predicted", "leave-one-out predicted"]
    return table(headers, rows, "mixture-swarm-table", sortable=True)


# -- check_section -----------------------------------------------------------------------------


def _is_check(found: Any) -> bool:
    return (
        isinstance(found, dict)
        and isinstance(found.get("scales"), list)
        and all(
            isinstance(scale, dict)
            and isinstance(scale.get("runs"), dict)
            and all(isinstance(run, dict) for run in scale["runs"].values())
            for scale in found["scales"]
        )
    )


def check_section(step: StepOutputs) -> str | None:
    """The mixture page: the plots, then at each scale every trained mixture's actual loss
    against the law's prediction and whether the proposal beats every reference; None
    without a validation.json."""
    found = step.json(CHECK_FILE)
    if not _is_check(found):
        return None
    intro = (
        f"<p>Target: {_target(found.get('target'))}; predictions by the law <b>{_text(found.get('regression'))}</b> "
        "(at the swarm's scale only).</p>"
    )
    return "\n".join([_heading(step), intro, *(_scale(scale) for scale in found["scales"])])


def _relative_error(predicted: Any, actual: Any) -> Any:
    """(predicted - actual) / actual, as check.py's prediction_error, or None without both."""
    if _is_number(predicted) and _is_number(actual) and actual:
        return (predicted - actual) / actual
    return None


def _scale(scale: Mapping[str, Any]) -> str:
    runs = scale["runs"]
    names = list(
        dict.fromkeys(
            str(name) for run in runs.values() if isinstance(run.get("weights"), Mapping) for name in run["weights"]
        )
    )
    predicted = scale.get("predicted") if isinstance(scale.get("predicted"), Mapping) else {}
    rows = [
        [f"<td>{_role(role)}</td>", *_weights(run.get("weights"), names), cell(run.get("evaluation"))]
        + [
            cell(run.get("loss")),
            cell(predicted.get(role)),
            cell(_relative_error(predicted.get(role), run.get("loss"))),
        ]
        for role, run in runs.items()
    ]
    tokens = scale.get("run_tokens")
    heading = f"<h4>{escape(str(scale.get('scale')))} scale" + (
        f" ({_text(tokens)} tokens a run)</h4>" if _is_number(tokens) else "</h4>"
    )
    headers = ["mixture", *names, "evaluation", "actual loss", "predicted loss", "relative error"]
    return heading + table(headers, rows) + _verdict(scale)


def _verdict(scale: Mapping[str, Any]) -> str:
    """Whether the proposal beats each reference trained at the scale, and so whether its
    advantage holds there; and how far off the law's prediction of it was."""
    beats = scale.get("proposal_beats")
    if not isinstance(beats, Mapping) or not beats:
        return "<p>No proposal and reference trained together at this scale: nothing to compare.</p>"
    versus = ", ".join(f"{_role(role)}: {'yes' if won else 'no'}" for role, won in beats.items())
    holds = "<b>holds</b>" if scale.get("holds") else "<b>does not hold</b>"
    error = scale.get("prediction_error")
    off = f" The law's prediction of its loss was off by {100 * error:+.2f}%." if _is_number(error) else ""
    return f"<p>The proposal beats {versus}. Its advantage {holds} at this scale.{off}</p>"
