"""The scaling-law fit behind `fit_scaling_law` (Chinchilla's approach 2, as Marin fits it).

1. Per budget C, a robust (Huber) quadratic of loss in x = log10(tokens): its minimum is
   the loss-optimal token count D*(C) and the optimal loss L*(C).
2. log10 D* = alpha * log10 C + log10 A, by least squares over the budgets.
3. L*(C) = E + B * C**-beta through the per-budget optima (E = 0 when only two budgets
   have an optimum: three parameters through two points have no unique answer).
4. Confidence intervals by a parametric bootstrap: every run's loss perturbed by Gaussian
   noise of the scale the parabolas leave (robustly estimated, never below a floor),
   and steps 1-3 refitted.
5. Forecasts of D*, N* = C / (6 D*) and L* at target budgets; held-out runs compared with
   the forecast of their budget, one by one and as the mean of each budget's seeds; and
   backtests: every budget left out in turn and forecast from the others.

Steps 1-3 are laws.py. A pure function of its inputs, the same bytes on every machine:
plain Python floats (arithmetic.py), and the bootstrap's noise from a seeded generator.
Tested on synthetic runs of known parameters (tests/rules/scaling/test_scaling_fit.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from marinbuild.targets.context import StepFailed
from rules.scaling.arithmetic import CI_PERCENTILES, DIGITS, interval, mean, significant
from rules.scaling.laws import SIZE_COUNTS, Laws, Parabola, compute_of, fit_laws, groups_of, noise_scale
from rules.scaling.runs import Run


@dataclass(frozen=True)
class Settings:
    huber_delta: float = 0.02
    bootstrap: int = 1000
    noise_floor: float = 0.005
    seed: int = 0


@dataclass(frozen=True)
class _Bootstrap:
    """The laws refitted on `samples` resamples of the losses (`failed` more had no fit),
    and the intervals they give."""

    samples: list[Laws]
    failed: int

    def interval(self, fn: Callable[[Laws], float]) -> list[float] | None:
        return interval([fn(sample) for sample in self.samples]) if self.samples else None

    def sizes(self, count: str) -> list[Any]:
        return [sample.sizes[count] for sample in self.samples if sample.sizes[count] is not None]


def _bootstrap(
    groups: dict[float, list[Run]], measured: dict[float, list[float]], sigma: float, settings: Settings
) -> _Bootstrap:
    """Step 4: every run's loss perturbed by N(0, sigma), the laws refitted, `bootstrap` times."""
    rng = np.random.default_rng(settings.seed)
    samples: list[Laws] = []
    failed = 0
    for _ in range(settings.bootstrap):
        noisy = {
            budget: [loss + float(noise) for loss, noise in zip(losses, rng.normal(0.0, sigma, size=len(losses)))]
            for budget, losses in measured.items()
        }
        try:
            samples.append(fit_laws(groups, noisy, settings.huber_delta))
        except StepFailed:
            failed += 1
    return _Bootstrap(samples, failed)


def _forecast(budget: float, laws: Laws, boot: _Bootstrap) -> dict[str, Any]:
    """Step 5 at one budget: the optimal tokens, parameters and loss, with their intervals."""
    tokens = laws.tokens(budget)

    def size(count: str) -> dict[str, Any] | None:
        law = laws.sizes[count]
        if law is None:
            return None
        values = [each.params(budget) for each in boot.sizes(count)]
        return {"value": significant(law.params(budget)), "ci": interval(values) if values else None}

    return {
        "budget": budget,
        "optimal_tokens": significant(tokens),
        "optimal_tokens_ci": boot.interval(lambda sample: sample.tokens(budget)),
        "optimal_params": significant(budget / (6 * tokens)),
        "optimal_size": {count: size(count) for count in SIZE_COUNTS},
        "loss": significant(laws.loss(budget)),
        "loss_ci": boot.interval(lambda sample: sample.loss(budget)),
    }


def _size_law(count: str, laws: Laws, boot: _Bootstrap) -> dict[str, Any] | None:
    law = laws.sizes[count]
    if law is None:
        return None
    fitted = boot.sizes(count)
    return {
        "exponent": significant(law.exponent),
        "exponent_ci": interval([each.exponent for each in fitted]) if fitted else None,
        "G": significant(10**law.log10_g),
        "G_ci": interval([10**each.log10_g for each in fitted]) if fitted else None,
        "used": law.used,
        "optimal_params": [
            {"budget": budget, "optimal_params": significant(10**x)} for budget, x in law.optimal_log_params.items()
        ],
    }


def _warnings(laws: Laws, boot: _Bootstrap, settings: Settings) -> list[str]:
    """What the fit could not do as asked: minima outside their sweep, too few budgets for
    E, resamples without a fit."""
    warnings = [
        f"budget {budget:.3g}: the parabola's minimum is outside the sweep"
        + (" (it has none: not convex)" if not parabola.convex else "")
        + ("; left out of the laws" if budget not in laws.used else "; extrapolated")
        for budget, parabola in laws.parabolas.items()
        if not parabola.inside
    ]
    if len(laws.used) < 3:
        warnings.append(
            f"the loss law has {len(laws.used)} budgets to fit: E is fixed at 0 (a pure power law through them); "
            "sweep three budgets or more to fit E"
        )
    if boot.failed:
        warnings.append(f"{boot.failed} of {settings.bootstrap} bootstrap resamples had no fit and were dropped")
    return warnings


def fit(
    runs: Sequence[Run], held_out: Sequence[Run], target_budgets: Sequence[float], settings: Settings
) -> dict[str, Any]:
    """The contents of fit.json (schema in docs/delphi.md)."""
    groups = groups_of(runs)
    if len(groups) < 2:
        raise StepFailed("a scaling law needs runs at two budgets at least")
    measured = {budget: [run.loss for run in group] for budget, group in groups.items()}
    laws = fit_laws(groups, measured, settings.huber_delta)
    sigma = noise_scale(groups, laws, settings.noise_floor)
    compute = compute_of(groups)
    boot = _bootstrap(groups, measured, sigma, settings)
    forecasts = [
        _forecast(budget, laws, boot)
        for budget in sorted({*map(float, target_budgets), *(run.budget for run in held_out)})
    ]
    by_budget = {entry["budget"]: entry for entry in forecasts}
    return {
        "method": {
            "parabola": "Huber-robust quadratic of loss in log10(tokens), per budget",
            "tokens_law": "log10 D* = alpha log10 C + log10 A (least squares)",
            "loss_law": "L*(C) = E + B C^-beta (E = 0 through two budgets)",
            "intervals": "parametric bootstrap: losses + N(0, noise_sigma), refitted",
            **asdict(settings),
            "noise_sigma": significant(sigma),
            "bootstrap_fits": len(boot.samples),
            "ci": list(CI_PERCENTILES),
            "digits": DIGITS,
        },
        "runs": [
            {**asdict(run), "residual": significant(run.loss - laws.parabolas[budget].at(math.log10(run.tokens)))}
            for budget, group in groups.items()
            for run in group
        ],
        "budgets": [
            _budget_entry(budget, parabola, compute[budget], budget in laws.used)
            for budget, parabola in laws.parabolas.items()
        ],
        "tokens_law": {
            "alpha": significant(laws.alpha),
            "alpha_ci": boot.interval(lambda sample: sample.alpha),
            "A": significant(10**laws.log10_a),
            "A_ci": boot.interval(lambda sample: 10**sample.log10_a),
        },
        "loss_law": {
            "E": significant(laws.e),
            "E_ci": boot.interval(lambda sample: sample.e),
            "B": significant(laws.b),
            "B_ci": boot.interval(lambda sample: sample.b),
            "beta": significant(laws.beta),
            "beta_ci": boot.interval(lambda sample: sample.beta),
        },
        "size_laws": {count: _size_law(count, laws, boot) for count in SIZE_COUNTS},
        "backtests": _backtests(groups, measured, laws, settings.huber_delta),
        "forecasts": forecasts,
        "held_out": [_check(run, by_budget[run.budget]) for run in held_out],
        "held_out_budgets": _check_budgets(held_out, by_budget, boot.samples, sigma, settings.seed),
        "warnings": _warnings(laws, boot, settings),
    }


def _budget_entry(budget: float, parabola: Parabola, compute: float, used: bool) -> dict[str, Any]:
    return {
        "budget": budget,
        "compute": significant(compute),
        "parabola": {"a": significant(parabola.a), "b": significant(parabola.b), "c": significant(parabola.c)},
        "log10_tokens_range": [significant(parabola.x_low), significant(parabola.x_high)],
        "minimum_inside": parabola.inside,
        "used": used,
        "optimal_tokens": significant(10**parabola.x_min) if parabola.convex else None,
        "optimal_loss": significant(parabola.at(parabola.x_min)) if parabola.convex else None,
    }


def _backtests(
    groups: dict[float, list[Run]], measured: dict[float, list[float]], laws: Laws, huber_delta: float
) -> list[dict[str, Any]]:
    """Each budget of the laws left out in turn, the laws refitted on the others, and its
    optimal loss forecast: how well the sweep forecasts itself (chosen on the sweep alone,
    before any held-out run is built)."""
    tests = []
    for budget in laws.used:
        try:
            rest = fit_laws(groups, measured, huber_delta, leave_out=budget)
        except StepFailed:
            continue
        compute = compute_of(groups)[budget]
        forecast = rest.loss(compute)
        # How far off the forecast optimum is, in log10: of the tokens, and of each parameter count.
        size_errors = {
            "tokens": laws.optimal_log_tokens[budget] - math.log10(rest.tokens(compute)),
            **{
                count: laws.sizes[count].optimal_log_params[budget] - math.log10(rest.sizes[count].params(compute))
                for count in SIZE_COUNTS
                if laws.sizes[count] is not None
                and rest.sizes[count] is not None
                and budget in laws.sizes[count].optimal_log_params
            },
        }
        tests.append(
            {
                "budget": budget,
                "fitted_on": rest.used,
                "optimal_loss": significant(laws.optimal_loss[budget]),
                "forecast_loss": significant(forecast),
                "relative_error": significant((laws.optimal_loss[budget] - forecast) / forecast),
                "log10_optimum_error": {name: significant(error) for name, error in size_errors.items()},
            }
        )
    return tests


def _check(run: Run, forecast: dict[str, Any]) -> dict[str, Any]:
    """A held-out run against the forecast for its budget: the loss it reached vs the
    forecast optimal loss, and its tokens vs the forecast optimal tokens."""
    loss_ci = forecast["loss_ci"]
    return {
        **asdict(run),
        "forecast_loss": forecast["loss"],
        "forecast_loss_ci": loss_ci,
        "relative_error": significant((run.loss - forecast["loss"]) / forecast["loss"]),
        "within_ci": loss_ci is not None and loss_ci[0] <= run.loss <= loss_ci[1],
        "forecast_optimal_tokens": forecast["optimal_tokens"],
        "tokens_ratio": significant(run.tokens / forecast["optimal_tokens"]),
    }


def _check_budgets(
    held_out: Sequence[Run], forecasts: dict[float, dict[str, Any]], samples: Sequence[Laws], sigma: float, seed: int
) -> list[dict[str, Any]]:
    """Per held-out budget, the mean loss of its runs (the seeds of one model) against the
    forecast: inside the forecast's interval (the law's uncertainty), and inside the
    prediction interval, which adds the noise of a mean of that many runs (sigma / sqrt(n),
    sigma the run-to-run noise the sweep's parabolas leave)."""
    checks = []
    rng = np.random.default_rng([seed, 1])  # apart from the bootstrap's stream
    for budget, group in groups_of(held_out).items():
        forecast = forecasts[budget]
        losses = [run.loss for run in group]
        average = mean(losses)
        spread = (
            math.sqrt(math.fsum([(loss - average) ** 2 for loss in losses]) / (len(losses) - 1))
            if len(losses) > 1
            else None
        )
        loss_ci = forecast["loss_ci"]
        noise = rng.normal(0.0, sigma / math.sqrt(len(losses)), size=len(samples))
        predicted = (
            interval([sample.loss(budget) + float(draw) for sample, draw in zip(samples, noise)]) if samples else None
        )
        checks.append(
            {
                "budget": budget,
                "labels": [run.label for run in group],
                "losses": losses,
                "loss": significant(average),
                "loss_sd": significant(spread),
                "forecast_loss": forecast["loss"],
                "forecast_loss_ci": loss_ci,
                "relative_error": significant((average - forecast["loss"]) / forecast["loss"]),
                "within_ci": loss_ci is not None and loss_ci[0] <= average <= loss_ci[1],
                "prediction_ci": predicted,
                "within_prediction_ci": predicted is not None and predicted[0] <= average <= predicted[1],
            }
        )
    return checks
