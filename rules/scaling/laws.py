"""The laws of a scaling fit (Chinchilla's approach 2, as Marin fits it), from one set of
losses: per budget a robust (Huber) quadratic of loss in log10(tokens), whose minimum is
the loss-optimal token count D*(C) and loss L*(C); then log10 D* linear in log10 C, L*(C)
= E + B * C**-beta through the optima, and the compute-optimal parameter counts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from marinbuild.targets.context import StepFailed
from rules.scaling.arithmetic import mean, percentile, solve
from rules.scaling.runs import Run

# The loss law's exponent is searched on this grid, then refined by golden section.
BETA_GRID = [0.005 * step for step in range(1, 601)]  # 0.005 ... 3.0
# Parameter counts a size law can be fitted in: Levanter's (embeddings and LM head
# included), and the attention and MLP weights alone.
SIZE_COUNTS = ("params", "non_embedding_params")


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
    matrix = [[math.fsum([wi * p[i] * p[j] for wi, p in zip(w, powers)]) for j in range(3)] for i in range(3)]
    rhs = [math.fsum([wi * p[i] * yi for wi, p, yi in zip(w, powers, y)]) for i in range(3)]
    return solve(matrix, rhs)


def fit_parabola(x: Sequence[float], loss: Sequence[float], huber_delta: float) -> Parabola:
    """A quadratic fitted with the Huber loss: residuals beyond `huber_delta` count linearly,
    so one diverged or mis-measured run bends the parabola far less than with least squares.

    Iteratively reweighted least squares (weight min(1, delta / |residual|)), which
    converges to the Huber estimate; deterministic, from the least-squares start.
    """
    x, loss = [float(v) for v in x], [float(v) for v in loss]
    if len(set(x)) < 3:
        raise StepFailed(f"a parabola needs runs at three token counts at least, got {len(set(x))}")
    centre = mean(x)
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
    mx, my = mean(x), mean(y)
    sxx = math.fsum([(xi - mx) ** 2 for xi in x])
    slope = math.fsum([(xi - mx) * (yi - my) for xi, yi in zip(x, y)]) / sxx
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
    centre = mean([math.log(c) for c in budgets])
    u = [math.log(c) - centre for c in budgets]

    def linear(beta: float) -> tuple[float, float, float]:
        """(squared error, E, B at C0) for one beta: least squares, E clamped at 0."""
        z = [math.exp(-beta * ui) for ui in u]
        n, sz, szz = len(u), math.fsum(z), math.fsum([zi * zi for zi in z])
        sl, szl = math.fsum(losses), math.fsum([zi * li for zi, li in zip(z, losses)])
        det = n * szz - sz * sz
        e = (szz * sl - sz * szl) / det if det > 0 else -1.0
        b = (n * szl - sz * sl) / det if det > 0 else 0.0
        if e < 0:
            e, b = 0.0, szl / szz
        return math.fsum([(e + b * zi - li) ** 2 for zi, li in zip(z, losses)]), e, b

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
    compute = compute_of(groups)
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


def groups_of(runs: Sequence[Run]) -> dict[float, list[Run]]:
    """The runs by budget, in the order of their labels: the fit (the bootstrap's draws
    included) does not depend on the order the runs were given in."""
    groups: dict[float, list[Run]] = {}
    for run in sorted(runs, key=lambda run: (run.budget, run.label)):
        groups.setdefault(run.budget, []).append(run)
    return groups


def compute_of(groups: dict[float, list[Run]]) -> dict[float, float]:
    """The compute of each budget as Levanter measured it: the geometric mean of its runs' FLOPs."""
    return {budget: math.exp(mean([math.log(run.flops) for run in group])) for budget, group in groups.items()}


def fit_laws(
    groups: dict[float, list[Run]], losses: dict[float, Sequence[float]], huber_delta: float, leave_out: float = 0.0
) -> Laws:
    """Steps 1-3 on given losses (the measured ones, or a bootstrap's); `leave_out`: a
    budget kept out of the laws (a backtest)."""
    compute = compute_of(groups)
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
