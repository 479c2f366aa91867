"""The scaling-law fit behind `fit_scaling_law` (Chinchilla's approach 2, as Marin fits it).

1. Per budget C, a robust (Huber) quadratic of loss in x = log10(tokens): its minimum is
   the loss-optimal token count D*(C) and the optimal loss L*(C).
2. log10 D* = alpha * log10 C + log10 A, by least squares over the budgets.
3. L*(C) = E + B * C**-beta through the per-budget optima.
4. Confidence intervals by a parametric bootstrap: every run's loss perturbed by Gaussian
   noise of the scale the parabolas leave (robustly estimated, never below a floor),
   and steps 1-3 refitted.
5. Forecasts of D*, N* = C / (6 D*) and L* at target budgets, and held-out runs compared
   with the forecast of their budget.

Pure numpy/scipy on plain data, so it is tested on synthetic runs of known parameters.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares, minimize_scalar

from marinbuild.targets.context import StepFailed

# Confidence intervals: the central 95% of the bootstrap.
CI_PERCENTILES = (2.5, 97.5)


@dataclass(frozen=True)
class Run:
    """One training run: its nominal budget, and what Levanter measured."""

    label: str
    budget: float
    tokens: float
    flops: float
    loss: float
    params: float | None = None


@dataclass(frozen=True)
class Settings:
    huber_delta: float = 0.02
    bootstrap: int = 1000
    noise_floor: float = 0.005
    seed: int = 0


def read_run(label: str, root: Path, budget: float) -> Run:
    """A run from a `train_lm` output: tokens, FLOPs and final eval loss from summary.json."""
    try:
        summary = json.loads((root / "summary.json").read_text())
    except (OSError, ValueError) as error:
        raise StepFailed(f"{label} has no readable summary.json ({error}); runs must be train_lm targets") from error
    missing = [name for name in ("tokens", "flops", "eval_loss") if summary.get(name) is None]
    if missing:
        raise StepFailed(
            f"{label}: summary.json lacks {', '.join(missing)}; train it with an evaluation at its last step"
        )
    return Run(
        label,
        float(budget),
        float(summary["tokens"]),
        float(summary["flops"]),
        float(summary["eval_loss"]),
        summary.get("parameter_count"),
    )


# -- the pieces -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Parabola:
    """loss = a x^2 + b x + c in x = log10(tokens), fitted over [x_low, x_high]."""

    a: float
    b: float
    c: float
    x_low: float
    x_high: float

    @property
    def convex(self) -> bool:
        return self.a > 0

    @property
    def x_min(self) -> float:
        return -self.b / (2 * self.a) if self.convex else math.nan

    @property
    def inside(self) -> bool:
        return self.convex and self.x_low <= self.x_min <= self.x_high

    def __call__(self, x: Any) -> Any:
        return self.a * np.square(x) + self.b * np.asarray(x) + self.c


def fit_parabola(x: np.ndarray, loss: np.ndarray, huber_delta: float) -> Parabola:
    """A quadratic fitted with the Huber loss: residuals beyond `huber_delta` count linearly,
    so one diverged or mis-measured run bends the parabola far less than with least squares."""
    if len(np.unique(x)) < 3:
        raise StepFailed(f"a parabola needs runs at three token counts at least, got {len(np.unique(x))}")
    centre = float(np.mean(x))
    start = np.polyfit(x - centre, loss, 2)
    result = least_squares(lambda p: np.polyval(p, x - centre) - loss, start, loss="huber", f_scale=huber_delta)
    a, b, c = result.x  # in x - centre; expand to x
    return Parabola(
        float(a), float(b - 2 * a * centre), float(a * centre**2 - b * centre + c), float(x.min()), float(x.max())
    )


def fit_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope and intercept."""
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept)


def fit_power_law(budgets: np.ndarray, losses: np.ndarray) -> tuple[float, float, float]:
    """E, B, beta of L = E + B * C**-beta, with E >= 0 and beta in (0, 3].

    For a given beta the law is linear in E and B, so only beta is searched (variable
    projection): a grid, then a bounded refinement around the best grid point. Fitted in
    u = ln(C / C0), C0 the geometric mean budget, for conditioning.
    """
    floor = float(losses.min())
    if floor <= 0:
        raise StepFailed(
            f"an optimal loss of {floor:.3g} is not positive: a parabola's minimum lies far outside its sweep"
        )
    centre = float(np.mean(np.log(budgets)))
    u = np.log(budgets) - centre

    def linear(betas: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(squared error, E, B at C0) for each beta: least squares, E clamped at 0."""
        z = np.exp(-np.outer(betas, u))
        n, sz, szz = len(u), z.sum(axis=1), (z * z).sum(axis=1)
        sl, szl = losses.sum(), z @ losses
        det = n * szz - sz * sz
        safe = np.where(np.abs(det) > 1e-300, det, 1e-300)
        e = (szz * sl - sz * szl) / safe
        b = (n * szl - sz * sl) / safe
        clamped = e < 0
        e = np.where(clamped, 0.0, e)
        b = np.where(clamped, szl / szz, b)
        error = ((e[:, None] + b[:, None] * z - losses) ** 2).sum(axis=1)
        return error, e, b

    grid = np.linspace(1e-3, 3.0, 300)
    best = grid[int(np.argmin(linear(grid)[0]))]
    step = grid[1] - grid[0]
    bounds = (max(1e-4, best - step), best + step)
    beta = float(minimize_scalar(lambda x: float(linear(np.array([x]))[0][0]), bounds=bounds, method="bounded").x)
    _, (e,), (b,) = linear(np.array([beta]))
    return float(e), float(b) * math.exp(beta * centre), beta


@dataclass(frozen=True)
class Laws:
    """Everything fitted from one set of losses."""

    parabolas: dict[float, Parabola]
    used: list[float]  # budgets whose optimum enters the laws
    optimal_log_tokens: dict[float, float]
    optimal_loss: dict[float, float]
    alpha: float
    log10_a: float
    e: float
    b: float
    beta: float

    def tokens(self, budget: float) -> float:
        return 10 ** (self.alpha * math.log10(budget) + self.log10_a)

    def loss(self, budget: float) -> float:
        return self.e + self.b * budget**-self.beta


def _groups(runs: Sequence[Run]) -> dict[float, list[Run]]:
    groups: dict[float, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.budget, []).append(run)
    return dict(sorted(groups.items()))


def _compute(groups: dict[float, list[Run]]) -> dict[float, float]:
    """The compute of each budget as Levanter measured it: the geometric mean of its runs' FLOPs."""
    return {budget: float(np.exp(np.mean(np.log([run.flops for run in group])))) for budget, group in groups.items()}


def fit_laws(groups: dict[float, list[Run]], losses: dict[float, np.ndarray], huber_delta: float) -> Laws:
    """Steps 1-3 on given losses (the measured ones, or a bootstrap's)."""
    compute = _compute(groups)
    parabolas = {
        budget: fit_parabola(np.log10([run.tokens for run in group]), losses[budget], huber_delta)
        for budget, group in groups.items()
    }
    used = [budget for budget, parabola in parabolas.items() if parabola.inside]
    if len(used) < 2:  # too few minima inside their sweep: extrapolate the convex ones
        used = [budget for budget, parabola in parabolas.items() if parabola.convex]
    if len(used) < 2:
        raise StepFailed(
            "fewer than two budgets have a convex isoFLOP parabola; widen the sweep "
            "(more candidates per budget) so each budget brackets its optimum"
        )
    x_star = {budget: parabolas[budget].x_min for budget in used}
    l_star = {budget: float(parabolas[budget](x_star[budget])) for budget in used}
    log_c = np.log10([compute[budget] for budget in used])
    alpha, log10_a = fit_line(log_c, np.array([x_star[budget] for budget in used]))
    e, b, beta = fit_power_law(
        np.array([compute[budget] for budget in used]), np.array([l_star[budget] for budget in used])
    )
    return Laws(parabolas, used, x_star, l_star, alpha, log10_a, e, b, beta)


def noise_scale(groups: dict[float, list[Run]], laws: Laws, floor: float) -> float:
    """The loss noise the parabolas leave: 1.4826 x the median absolute residual (a robust
    standard deviation, blind to outliers), scaled for the 3 parameters per budget."""
    residuals = [
        run.loss - float(laws.parabolas[budget](math.log10(run.tokens)))
        for budget, group in groups.items()
        for run in group
    ]
    n, p = len(residuals), 3 * len(groups)
    if n <= p:
        return floor
    sigma = 1.4826 * float(np.median(np.abs(residuals))) * math.sqrt(n / (n - p))
    return max(sigma, floor)


def _interval(values: Sequence[float]) -> list[float] | None:
    finite = np.asarray([value for value in values if math.isfinite(value)])
    if len(finite) == 0:
        return None
    low, high = np.percentile(finite, CI_PERCENTILES)
    return [float(low), float(high)]


# -- the whole fit --------------------------------------------------------------------------


def fit(
    runs: Sequence[Run], held_out: Sequence[Run], target_budgets: Sequence[float], settings: Settings
) -> dict[str, Any]:
    """The contents of fit.json (schema in docs/delphi.md)."""
    groups = _groups(runs)
    if len(groups) < 2:
        raise StepFailed("a scaling law needs runs at two budgets at least")
    measured = {budget: np.array([run.loss for run in group]) for budget, group in groups.items()}
    laws = fit_laws(groups, measured, settings.huber_delta)
    sigma = noise_scale(groups, laws, settings.noise_floor)
    compute = _compute(groups)
    forecast_budgets = sorted({*map(float, target_budgets), *(run.budget for run in held_out)})

    rng = np.random.default_rng(settings.seed)
    samples: list[Laws] = []
    failed = 0
    for _ in range(settings.bootstrap):
        noisy = {budget: loss + rng.normal(0.0, sigma, size=len(loss)) for budget, loss in measured.items()}
        try:
            samples.append(fit_laws(groups, noisy, settings.huber_delta))
        except StepFailed:
            failed += 1

    def interval(fn) -> list[float] | None:
        return _interval([fn(sample) for sample in samples]) if samples else None

    def forecast(budget: float) -> dict[str, Any]:
        tokens = laws.tokens(budget)
        return {
            "budget": budget,
            "optimal_tokens": tokens,
            "optimal_tokens_ci": interval(lambda sample: sample.tokens(budget)),
            "optimal_params": budget / (6 * tokens),
            "loss": laws.loss(budget),
            "loss_ci": interval(lambda sample: sample.loss(budget)),
        }

    forecasts = [forecast(budget) for budget in forecast_budgets]
    by_budget = {entry["budget"]: entry for entry in forecasts}
    warnings = [
        f"budget {budget:.3g}: the parabola's minimum is outside the sweep"
        + (" (it has none: not convex)" if not parabola.convex else "")
        + ("; left out of the laws" if budget not in laws.used else "; extrapolated")
        for budget, parabola in laws.parabolas.items()
        if not parabola.inside
    ]
    if len(laws.used) < 3:
        warnings.append(
            f"the loss law has 3 parameters and {len(laws.used)} budgets to fit: it passes through them "
            "exactly and its forecasts are unconstrained; sweep more budgets"
        )
    if failed:
        warnings.append(f"{failed} of {settings.bootstrap} bootstrap resamples had no fit and were dropped")
    return {
        "method": {
            "parabola": "Huber-robust quadratic of loss in log10(tokens), per budget",
            "tokens_law": "log10 D* = alpha log10 C + log10 A (least squares)",
            "loss_law": "L*(C) = E + B C^-beta",
            "bootstrap": "parametric: losses + N(0, noise_sigma), refitted",
            **asdict(settings),
            "noise_sigma": sigma,
            "bootstrap_fits": len(samples),
            "ci": list(CI_PERCENTILES),
        },
        "runs": [
            {
                **asdict(run),
                "residual": run.loss - float(laws.parabolas[run.budget](math.log10(run.tokens))),
            }
            for run in runs
        ],
        "budgets": [
            {
                "budget": budget,
                "compute": compute[budget],
                "parabola": {"a": parabola.a, "b": parabola.b, "c": parabola.c},
                "log10_tokens_range": [parabola.x_low, parabola.x_high],
                "minimum_inside": parabola.inside,
                "used": budget in laws.used,
                "optimal_tokens": 10**parabola.x_min if parabola.convex else None,
                "optimal_loss": float(parabola(parabola.x_min)) if parabola.convex else None,
            }
            for budget, parabola in laws.parabolas.items()
        ],
        "tokens_law": {
            "alpha": laws.alpha,
            "alpha_ci": interval(lambda sample: sample.alpha),
            "A": 10**laws.log10_a,
            "A_ci": interval(lambda sample: 10**sample.log10_a),
        },
        "loss_law": {
            "E": laws.e,
            "E_ci": interval(lambda sample: sample.e),
            "B": laws.b,
            "B_ci": interval(lambda sample: sample.b),
            "beta": laws.beta,
            "beta_ci": interval(lambda sample: sample.beta),
        },
        "forecasts": forecasts,
        "held_out": [_check(run, by_budget[run.budget]) for run in held_out],
        "warnings": warnings,
    }


def _check(run: Run, forecast: dict[str, Any]) -> dict[str, Any]:
    """A held-out run against the forecast for its budget: the loss it reached vs the
    forecast optimal loss, and its tokens vs the forecast optimal tokens."""
    interval = forecast["loss_ci"]
    return {
        **asdict(run),
        "forecast_loss": forecast["loss"],
        "forecast_loss_ci": interval,
        "relative_error": (run.loss - forecast["loss"]) / forecast["loss"],
        "within_ci": interval is not None and interval[0] <= run.loss <= interval[1],
        "forecast_optimal_tokens": forecast["optimal_tokens"],
        "tokens_ratio": run.tokens / forecast["optimal_tokens"],
    }
