"""The scaling-law rule: `fit_scaling_law`, over the runs of an isoFLOP sweep.

Declared here, cheap to import; the fit (fit.py, on runs.py, laws.py and arithmetic.py:
plain Python floats and a seeded generator, the same bytes on any machine) and its plots
(plots.py, matplotlib) are imported when the step runs. The macros that declare sweeps
(`isoflop_sweep`, `optimal_runs`) are scaling.star; docs/delphi.md describes the method
and `fit.json`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.context import Context
from marinbuild.targets.outputs import ReportSection
from marinbuild.targets.rule import Execution, Resources, Rule
from rules.common.headline import json_headline
from rules.common.ranges import check_attrs
from rules.scaling.constants import FIT_FILE, ISOFLOPS_PLOT, SCALING_PLOT


def _is_budget(value: JsonValue) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _validate(attrs: Mapping[str, JsonValue]) -> None:
    for name in ("runs", "held_out"):
        for label, budget in attrs[name].items():
            if not _is_budget(budget):
                raise ValueError(f"{name}: the budget of {label} must be a positive number of FLOPs, got {budget!r}")
    overlap = sorted(set(attrs["runs"]) & set(attrs["held_out"]))
    if overlap:
        raise ValueError(f"held_out: {overlap} are also fitted runs; a held-out run must not be in the fit")
    budgets = attrs["target_budgets"]
    if not isinstance(budgets, list) or not all(_is_budget(budget) for budget in budgets):
        raise ValueError(f"target_budgets: expected a list of positive numbers of FLOPs, got {budgets!r}")
    if len(set(attrs["runs"].values())) < 2:
        raise ValueError("runs: a scaling law needs runs at two budgets at least")
    check_attrs("fit_scaling_law", attrs)


def _describe(fit: Mapping[str, Any]) -> str:
    alpha, low_high = fit["tokens_law"]["alpha"], fit["tokens_law"]["alpha_ci"]
    parts = [f"alpha {alpha:.3f}" + (f" [{low_high[0]:.3f}, {low_high[1]:.3f}]" if low_high else "")]
    parts += [
        f"held-out {check['budget']:.0e}: loss {check['loss']:.3f}"
        + (f" (mean of {len(check['losses'])})" if len(check["losses"]) > 1 else "")
        + f", forecast {check['forecast_loss']:.3f} (error {100 * check['relative_error']:+.1f}%)"
        for check in fit.get("held_out_budgets", [])
    ]
    return "; ".join(parts) + f"; {FIT_FILE}, {ISOFLOPS_PLOT}, {SCALING_PLOT}"


def _headline(out: Path) -> str | None:
    return json_headline(out / FIT_FILE, _describe)


def _fit(ctx: Context) -> None:
    from rules.scaling import plots
    from rules.scaling.fit import Settings, fit
    from rules.scaling.runs import Run, read_run

    def runs(attribute: str) -> list[Run]:
        return [read_run(label, ctx.inputs[label].root, budget) for label, budget in ctx.attrs[attribute].items()]

    settings = Settings(
        huber_delta=ctx.attrs["huber_delta"],
        bootstrap=ctx.attrs["bootstrap"],
        noise_floor=ctx.attrs["noise_floor"],
        seed=ctx.attrs["seed"],
    )
    fitted = fit(runs("runs"), runs("held_out"), ctx.attrs["target_budgets"], settings)
    for warning in fitted["warnings"]:
        ctx.log.warning("%s", warning)
    (ctx.out / FIT_FILE).write_text(json.dumps(fitted, indent=2) + "\n")
    plots.isoflops(fitted, ctx.out / ISOFLOPS_PLOT)
    plots.scaling(fitted, ctx.out / SCALING_PLOT)
    ctx.log.info("%s", _headline(ctx.out))


fit_scaling_law = Rule(
    name="fit_scaling_law",
    # 2: the fit in plain Python floats (fit.json gains size laws, backtests, held-out
    # budgets) and redrawn plots: a version-1 output is not what this code makes.
    version=2,
    impl=_fit,
    doc=(
        "Fit isoFLOP parabolas, the compute-optimal token law and the loss power law"
        " -> fit.json, isoflops.png, scaling.png."
    ),
    attrs={
        "runs": Attr(
            types.LABEL_KEYED_DICT, doc="{train_lm target: its budget in FLOPs}, e.g. what isoflop_sweep returns."
        ),
        "held_out": Attr(
            types.LABEL_KEYED_DICT,
            default={},
            doc="{train_lm target: budget} left out of the fit, compared with its forecast.",
        ),
        "target_budgets": Attr(
            types.JSON, default=[], doc="Budgets (FLOPs) to forecast the optimal tokens and loss at."
        ),
        "huber_delta": Attr(
            types.FLOAT, default=0.02, doc="Loss residual (nats) beyond which a run counts linearly, not squared."
        ),
        "bootstrap": Attr(types.INT, default=1000, doc="Bootstrap resamples for the confidence intervals (0: none)."),
        "noise_floor": Attr(types.FLOAT, default=0.005, doc="Smallest loss noise (nats) the bootstrap assumes."),
        "seed": Attr(types.INT, default=0, doc="Seed of the bootstrap."),
    },
    validate=_validate,
    headline=_headline,
    report_section=ReportSection(
        "rules.scaling.report:fit_section", (FIT_FILE,), "Scaling law", "Scaling laws", "scaling"
    ),
    execution=Execution.SUBPROCESS,
    resources=Resources(cpu=1, memory_gb=1),
    packages=("numpy", "matplotlib"),
    # The fit and the plots are the step's implementation: their source counts in its code digest.
    code_modules=(
        "rules.scaling.fit",
        "rules.scaling.laws",
        "rules.scaling.runs",
        "rules.scaling.arithmetic",
        "rules.scaling.plots",
    ),
)
