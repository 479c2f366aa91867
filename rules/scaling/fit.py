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

A pure function of its inputs, the same bytes on every machine: the arithmetic is plain
Python floats (sums with math.fsum, correctly rounded whatever their order; 3x3 systems
solved by hand), never BLAS/LAPACK, whose kernels and threads differ between CPUs; the
bootstrap's noise comes from a seeded generator; and every fitted number is published
rounded to `DIGITS` significant digits, far above the last bits a libm could differ in.
Tested on synthetic runs of known parameters (tests/test_scaling_fit.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from marinbuild.targets.context import StepFailed

# Confidence intervals: the central 95% of the bootstrap.
CI_PERCENTILES = (2.5, 97.5)
# Significant digits of every fitted number in fit.json.
DIGITS = 6
# The loss law's exponent is searched on this grid, then refined by golden section.
BETA_GRID = [0.005 * step for step in range(1, 601)]  # 0.005 ... 3.0


@dataclass(frozen=True)
class Run:
    """One training run: its nominal budget, and what Levanter measured."""

    label: str
    budget: float
    tokens: float
    flops: float
    loss: float
    params: float | None = None  # Levanter's count, embeddings included
    non_embedding_params: float | None = None  # attention and MLP weights (model.json)


@dataclass(frozen=True)
class Settings:
    huber_delta: float = 0.02
    bootstrap: int = 1000
    noise_floor: float = 0.005
    seed: int = 0


def read_run(label: str, root: Path, budget: float) -> Run:
    """A run from a `train_lm` output: tokens, FLOPs and final eval loss from summary.json,
    the model's shape from model.json."""
    try:
        summary = json.loads((root / "summary.json").read_text())
    except (OSError, ValueError) as error:
        raise StepFailed(f"{label} has no readable summary.json ({error}); runs must be train_lm targets") from error
    missing = [name for name in ("tokens", "flops", "eval_loss") if summary.get(name) is None]
    if missing:
        raise StepFailed(
            f"{label}: summary.json lacks {', '.join(missing)}; train it with an evaluation at its last step"
        )
    try:
        model = json.loads((root / "model.json").read_text())["model"]
    except (OSError, ValueError, KeyError):
        model = None
    return Run(
        label,
        float(budget),
        float(summary["tokens"]),
        float(summary["flops"]),
        float(summary["eval_loss"]),
        summary.get("parameter_count"),
        None if model is None else non_embedding_params(model),
    )


def non_embedding_params(model: dict[str, Any]) -> int:
    """The attention and MLP weights of a model config that a token goes through: of a
    mixture of experts, its active experts' and the router's (as rules/scaling.star counts
    them)."""
    hidden, heads, kv_heads = model["hidden_dim"], model["num_heads"], model["num_kv_heads"]
    head_dim = model.get("head_dim") or hidden // heads
    attention = hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden
    experts = model.get("n_routed_experts", 1)
    active = model.get("num_experts_per_tok", 1) + model.get("n_shared_experts", 0)
    router = hidden * experts if experts > 1 else 0
    return model["num_layers"] * (attention + 3 * hidden * model["intermediate_dim"] * active + router)


# -- arithmetic that gives the same bits everywhere -----------------------------------------


def _sum(values: Sequence[float]) -> float:
    return math.fsum(values)


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _solve(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """A small linear system by Gaussian elimination with partial pivoting."""
    n = len(rhs)
    rows = [list(map(float, row)) + [float(value)] for row, value in zip(matrix, rhs)]
    for column in range(n):
        pivot = max(range(column, n), key=lambda row: abs(rows[row][column]))
        if rows[pivot][column] == 0.0:
            raise StepFailed("a singular system: the runs of a budget do not span three token counts")
        rows[column], rows[pivot] = rows[pivot], rows[column]
        for row in range(column + 1, n):
            factor = rows[row][column] / rows[column][column]
            rows[row] = [a - factor * b for a, b in zip(rows[row], rows[column])]
    solution = [0.0] * n
    for row in reversed(range(n)):
        solution[row] = (rows[row][n] - _sum([rows[row][k] * solution[k] for k in range(row + 1, n)])) / rows[row][row]
    return solution


def significant(value: float | None, digits: int = DIGITS) -> float | None:
    """`value` rounded to `digits` significant digits (None and non-finite values as they are)."""
    if value is None or not math.isfinite(value) or value == 0:
        return value
    return float(f"{value:.{digits - 1}e}")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile, interpolated linearly between order statistics (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


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

    def at(self, x: float) -> float:
        return self.a * x * x + self.b * x + self.c


def _weighted_quadratic(x: Sequence[float], y: Sequence[float], w: Sequence[float]) -> list[float]:
    """[a, b, c] of the weighted least-squares quadratic (normal equations: 3x3, well
    conditioned for x centred on the sweep)."""
    powers = [[xi**k for k in (2, 1, 0)] for xi in x]
    matrix = [[_sum([wi * p[i] * p[j] for wi, p in zip(w, powers)]) for j in range(3)] for i in range(3)]
    rhs = [_sum([wi * p[i] * yi for wi, p, yi in zip(w, powers, y)]) for i in range(3)]
    return _solve(matrix, rhs)


def fit_parabola(x: Sequence[float], loss: Sequence[float], huber_delta: float) -> Parabola:
    """A quadratic fitted with the Huber loss: residuals beyond `huber_delta` count linearly,
    so one diverged or mis-measured run bends the parabola far less than with least squares.

    Iteratively reweighted least squares (weight min(1, delta / |residual|)), which
    converges to the Huber estimate; deterministic, from the least-squares start.
    """
    x, loss = [float(v) for v in x], [float(v) for v in loss]
    if len(set(x)) < 3:
        raise StepFailed(f"a parabola needs runs at three token counts at least, got {len(set(x))}")
    centre = _mean(x)
    u = [xi - centre for xi in x]
    weights = [1.0] * len(u)
    coefficients = _weighted_quadratic(u, loss, weights)
    for _ in range(200):
        residuals = [coefficients[0] * ui * ui + coefficients[1] * ui + coefficients[2] - yi for ui, yi in zip(u, loss)]
        weights = [1.0 if abs(r) <= huber_delta else huber_delta / abs(r) for r in residuals]
        updated = _weighted_quadratic(u, loss, weights)
        moved = max(abs(new - old) for new, old in zip(updated, coefficients))
        coefficients = updated
        if moved <= 1e-13:
            break
    a, b, c = coefficients  # in x - centre; expand to x
    return Parabola(a, b - 2 * a * centre, a * centre * centre - b * centre + c, min(x), max(x))


def fit_line(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope and intercept."""
    mx, my = _mean(x), _mean(y)
    sxx = _sum([(xi - mx) ** 2 for xi in x])
    slope = _sum([(xi - mx) * (yi - my) for xi, yi in zip(x, y)]) / sxx
    return slope, my - slope * mx


def fit_power_law(budgets: Sequence[float], losses: Sequence[float]) -> tuple[float, float, float]:
    """E, B, beta of L = E + B * C**-beta, with E >= 0 and beta in (0, 3].

    Three parameters need three budgets: through two, E = 0 and the law is a straight line
    in log-log (with three free parameters, infinitely many laws pass exactly through two
    points, and which one a search lands on is decided by the last bits of its inputs).
    For a given beta the law is linear in E and B, so only beta is searched (variable
    projection): a grid, then golden-section refinement around the best grid point. Fitted
    in u = ln(C / C0), C0 the geometric mean budget, for conditioning.
    """
    budgets, losses = [float(c) for c in budgets], [float(v) for v in losses]
    if min(losses) <= 0:
        raise StepFailed(
            f"an optimal loss of {min(losses):.3g} is not positive: a parabola's minimum lies far outside its sweep"
        )
    if len(budgets) < 3:
        slope, intercept = fit_line([math.log(c) for c in budgets], [math.log(v) for v in losses])
        return 0.0, math.exp(intercept), -slope
    centre = _mean([math.log(c) for c in budgets])
    u = [math.log(c) - centre for c in budgets]

    def linear(beta: float) -> tuple[float, float, float]:
        """(squared error, E, B at C0) for one beta: least squares, E clamped at 0."""
        z = [math.exp(-beta * ui) for ui in u]
        n, sz, szz = len(u), _sum(z), _sum([zi * zi for zi in z])
        sl, szl = _sum(losses), _sum([zi * li for zi, li in zip(z, losses)])
        det = n * szz - sz * sz
        e = (szz * sl - sz * szl) / det if det > 0 else -1.0
        b = (n * szl - sz * sl) / det if det > 0 else 0.0
        if e < 0:
            e, b = 0.0, szl / szz
        return _sum([(e + b * zi - li) ** 2 for zi, li in zip(z, losses)]), e, b

    errors = [linear(beta)[0] for beta in BETA_GRID]
    best = min(range(len(BETA_GRID)), key=lambda index: (errors[index], index))
    low, high = BETA_GRID[max(0, best - 1)], BETA_GRID[min(len(BETA_GRID) - 1, best + 1)]
    low = max(low, 1e-4)
    ratio = (math.sqrt(5) - 1) / 2
    left, right = high - ratio * (high - low), low + ratio * (high - low)
    f_left, f_right = linear(left)[0], linear(right)[0]
    for _ in range(60):
        if f_left <= f_right:
            high, right, f_right = right, left, f_left
            left = high - ratio * (high - low)
            f_left = linear(left)[0]
        else:
            low, left, f_left = left, right, f_right
            right = low + ratio * (high - low)
            f_right = linear(right)[0]
    beta = (low + high) / 2
    _, e, b = linear(beta)
    return e, b * math.exp(beta * centre), beta


# Parameter counts a size law can be fitted in: Levanter's (embeddings and LM head
# included), and the attention and MLP weights alone.
SIZE_COUNTS = ("params", "non_embedding_params")


@dataclass(frozen=True)
class SizeLaw:
    """N*(C) = G C^exponent: the minima of per-budget parabolas of loss in log10(parameters)."""

    used: list[float]
    optimal_log_params: dict[float, float]
    exponent: float
    log10_g: float

    def params(self, budget: float) -> float:
        return 10 ** (self.exponent * math.log10(budget) + self.log10_g)


def fit_size_law(
    groups: dict[float, list[Run]],
    losses: dict[float, Sequence[float]],
    huber_delta: float,
    count: str,
    leave_out: float = 0.0,
) -> SizeLaw | None:
    """The compute-optimal parameter count, `count` being one of SIZE_COUNTS; None when a
    run lacks the count, a budget's runs do not span three sizes, or fewer than two budgets
    have their minimum inside the sweep."""
    if any(getattr(run, count) is None for group in groups.values() for run in group):
        return None
    if any(len({getattr(run, count) for run in group}) < 3 for group in groups.values()):
        return None
    compute = _compute(groups)
    used, x_star = [], {}
    for budget, group in groups.items():
        parabola = fit_parabola([math.log10(getattr(run, count)) for run in group], losses[budget], huber_delta)
        if budget != leave_out and parabola.inside:
            used.append(budget)
            x_star[budget] = parabola.x_min
    if len(used) < 2:
        return None
    exponent, log10_g = fit_line([math.log10(compute[budget]) for budget in used], [x_star[b] for b in used])
    return SizeLaw(used, x_star, exponent, log10_g)


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
    sizes: dict[str, SizeLaw | None]

    def tokens(self, budget: float) -> float:
        return 10 ** (self.alpha * math.log10(budget) + self.log10_a)

    def loss(self, budget: float) -> float:
        return self.e + self.b * budget**-self.beta


def _groups(runs: Sequence[Run]) -> dict[float, list[Run]]:
    """The runs by budget, in the order of their labels: the fit (the bootstrap's draws
    included) does not depend on the order the runs were given in."""
    groups: dict[float, list[Run]] = {}
    for run in sorted(runs, key=lambda run: (run.budget, run.label)):
        groups.setdefault(run.budget, []).append(run)
    return groups


def _compute(groups: dict[float, list[Run]]) -> dict[float, float]:
    """The compute of each budget as Levanter measured it: the geometric mean of its runs' FLOPs."""
    return {budget: math.exp(_mean([math.log(run.flops) for run in group])) for budget, group in groups.items()}


def fit_laws(
    groups: dict[float, list[Run]], losses: dict[float, Sequence[float]], huber_delta: float, leave_out: float = 0.0
) -> Laws:
    """Steps 1-3 on given losses (the measured ones, or a bootstrap's); `leave_out`: a
    budget kept out of the laws (a backtest)."""
    compute = _compute(groups)
    parabolas = {
        budget: fit_parabola([math.log10(run.tokens) for run in group], losses[budget], huber_delta)
        for budget, group in groups.items()
    }
    candidates = [budget for budget in parabolas if budget != leave_out]
    used = [budget for budget in candidates if parabolas[budget].inside]
    if len(used) < 2:  # too few minima inside their sweep: extrapolate the convex ones
        used = [budget for budget in candidates if parabolas[budget].convex]
    if len(used) < 2:
        raise StepFailed(
            "fewer than two budgets have a convex isoFLOP parabola; widen the sweep "
            "(more candidates per budget) so each budget brackets its optimum"
        )
    x_star = {budget: parabolas[budget].x_min for budget in used}
    l_star = {budget: parabolas[budget].at(x_star[budget]) for budget in used}
    log_c = [math.log10(compute[budget]) for budget in used]
    alpha, log10_a = fit_line(log_c, [x_star[budget] for budget in used])
    e, b, beta = fit_power_law([compute[budget] for budget in used], [l_star[budget] for budget in used])
    sizes = {count: fit_size_law(groups, losses, huber_delta, count, leave_out) for count in SIZE_COUNTS}
    return Laws(parabolas, used, x_star, l_star, alpha, log10_a, e, b, beta, sizes)


def noise_scale(groups: dict[float, list[Run]], laws: Laws, floor: float) -> float:
    """The loss noise the parabolas leave: 1.4826 x the median absolute residual (a robust
    standard deviation, blind to outliers), scaled for the 3 parameters per budget."""
    residuals = [
        run.loss - laws.parabolas[budget].at(math.log10(run.tokens))
        for budget, group in groups.items()
        for run in group
    ]
    n, p = len(residuals), 3 * len(groups)
    if n <= p:
        return floor
    sigma = 1.4826 * percentile([abs(r) for r in residuals], 50) * math.sqrt(n / (n - p))
    return max(sigma, floor)


def _interval(values: Sequence[float]) -> list[float] | None:
    finite = [value for value in values if math.isfinite(value)]
    if not finite:
        return None
    return [significant(percentile(finite, CI_PERCENTILES[0])), significant(percentile(finite, CI_PERCENTILES[1]))]


# -- the whole fit --------------------------------------------------------------------------


def fit(
    runs: Sequence[Run], held_out: Sequence[Run], target_budgets: Sequence[float], settings: Settings
) -> dict[str, Any]:
    """The contents of fit.json (schema in docs/delphi.md)."""
    groups = _groups(runs)
    if len(groups) < 2:
        raise StepFailed("a scaling law needs runs at two budgets at least")
    measured = {budget: [run.loss for run in group] for budget, group in groups.items()}
    laws = fit_laws(groups, measured, settings.huber_delta)
    sigma = noise_scale(groups, laws, settings.noise_floor)
    compute = _compute(groups)
    forecast_budgets = sorted({*map(float, target_budgets), *(run.budget for run in held_out)})

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

    def interval(fn: Callable[[Laws], float]) -> list[float] | None:
        return _interval([fn(sample) for sample in samples]) if samples else None

    def size(count: str, budget: float) -> dict[str, Any] | None:
        law = laws.sizes[count]
        if law is None:
            return None
        values = [sample.sizes[count].params(budget) for sample in samples if sample.sizes[count] is not None]
        return {"value": significant(law.params(budget)), "ci": _interval(values) if values else None}

    def forecast(budget: float) -> dict[str, Any]:
        tokens = laws.tokens(budget)
        return {
            "budget": budget,
            "optimal_tokens": significant(tokens),
            "optimal_tokens_ci": interval(lambda sample: sample.tokens(budget)),
            "optimal_params": significant(budget / (6 * tokens)),
            "optimal_size": {count: size(count, budget) for count in SIZE_COUNTS},
            "loss": significant(laws.loss(budget)),
            "loss_ci": interval(lambda sample: sample.loss(budget)),
        }

    def size_law(count: str) -> dict[str, Any] | None:
        law = laws.sizes[count]
        if law is None:
            return None
        fitted = [sample.sizes[count] for sample in samples if sample.sizes[count] is not None]
        return {
            "exponent": significant(law.exponent),
            "exponent_ci": _interval([each.exponent for each in fitted]) if fitted else None,
            "G": significant(10**law.log10_g),
            "G_ci": _interval([10**each.log10_g for each in fitted]) if fitted else None,
            "used": law.used,
            "optimal_params": [
                {"budget": budget, "optimal_params": significant(10**x)} for budget, x in law.optimal_log_params.items()
            ],
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
            f"the loss law has {len(laws.used)} budgets to fit: E is fixed at 0 (a pure power law through them); "
            "sweep three budgets or more to fit E"
        )
    if failed:
        warnings.append(f"{failed} of {settings.bootstrap} bootstrap resamples had no fit and were dropped")
    return {
        "method": {
            "parabola": "Huber-robust quadratic of loss in log10(tokens), per budget",
            "tokens_law": "log10 D* = alpha log10 C + log10 A (least squares)",
            "loss_law": "L*(C) = E + B C^-beta (E = 0 through two budgets)",
            "intervals": "parametric bootstrap: losses + N(0, noise_sigma), refitted",
            **asdict(settings),
            "noise_sigma": significant(sigma),
            "bootstrap_fits": len(samples),
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
            "alpha_ci": interval(lambda sample: sample.alpha),
            "A": significant(10**laws.log10_a),
            "A_ci": interval(lambda sample: 10**sample.log10_a),
        },
        "loss_law": {
            "E": significant(laws.e),
            "E_ci": interval(lambda sample: sample.e),
            "B": significant(laws.b),
            "B_ci": interval(lambda sample: sample.b),
            "beta": significant(laws.beta),
            "beta_ci": interval(lambda sample: sample.beta),
        },
        "size_laws": {count: size_law(count) for count in SIZE_COUNTS},
        "backtests": _backtests(groups, measured, laws, settings.huber_delta),
        "forecasts": forecasts,
        "held_out": [_check(run, by_budget[run.budget]) for run in held_out],
        "held_out_budgets": _check_budgets(held_out, by_budget, samples, sigma, settings.seed),
        "warnings": warnings,
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
        compute = _compute(groups)[budget]
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
    interval = forecast["loss_ci"]
    return {
        **asdict(run),
        "forecast_loss": forecast["loss"],
        "forecast_loss_ci": interval,
        "relative_error": significant((run.loss - forecast["loss"]) / forecast["loss"]),
        "within_ci": interval is not None and interval[0] <= run.loss <= interval[1],
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
    for budget, group in _groups(held_out).items():
        forecast = forecasts[budget]
        losses = [run.loss for run in group]
        mean = _mean(losses)
        spread = (
            math.sqrt(_sum([(loss - mean) ** 2 for loss in losses]) / (len(losses) - 1)) if len(losses) > 1 else None
        )
        interval = forecast["loss_ci"]
        noise = rng.normal(0.0, sigma / math.sqrt(len(losses)), size=len(samples))
        predicted = (
            _interval([sample.loss(budget) + float(draw) for sample, draw in zip(samples, noise)]) if samples else None
        )
        checks.append(
            {
                "budget": budget,
                "labels": [run.label for run in group],
                "losses": losses,
                "loss": significant(mean),
                "loss_sd": significant(spread),
                "forecast_loss": forecast["loss"],
                "forecast_loss_ci": interval,
                "relative_error": significant((mean - forecast["loss"]) / forecast["loss"]),
                "within_ci": interval is not None and interval[0] <= mean <= interval[1],
                "prediction_ci": predicted,
                "within_prediction_ci": predicted is not None and predicted[0] <= mean <= predicted[1],
            }
        )
    return checks
