"""The mixture a fitted law proposes: the minimum of its predicted loss over the mixtures
that keep every source under its repetition cap, with an optional pull towards the prior,
predicted(w) + kl_weight * KL(w || prior) (Olmix's exact proposer's objective).

The law may be smooth (log-linear, where Olmix solves the convex program exactly) or
piecewise constant (LightGBM, where RegMix and Olmix search random mixtures), so the search
does both: candidates first (Dirichlet draws around the prior at several concentrations, as
RegMix's and Olmix's simulation proposers draw them, uniform draws, the corners of the capped
simplex, then draws around the best so far), then SLSQP from the best few, whose answer is
kept only where it improves on its start. Deterministic for a seed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from rules.mixtures.draws import feasible

# Draws Dirichlet(concentration * k * prior): 1 about a uniform prior is uniform over the
# simplex, 0.5 reaches its edges, 64 stays near the prior. The second round is as tight
# about the best candidate of the first.
CONCENTRATIONS = (0.5, 1.0, 4.0, 16.0, 64.0)
LOCAL_CONCENTRATIONS = (64.0, 256.0, 1024.0)
REFINED = 5  # candidates SLSQP starts from
MAX_ORDERS = 5040  # orders of greedy fills: all of them up to 7 sources, as many drawn beyond
STEP = math.sqrt(np.finfo(float).eps)  # of the finite differences SLSQP's gradient is taken by
BISECTIONS = 100  # of the projection onto the capped simplex: enough for float64's last bit


@dataclass(frozen=True)
class Proposal:
    weights: list[float]
    predicted: float  # the law's loss at `weights`
    objective: float  # predicted + kl_weight * KL(weights || prior)


def propose(
    predict: Callable[[list[list[float]]], list[float]],
    prior: Sequence[float],
    caps: Sequence[float],
    kl_weight: float = 0.0,
    seed: int = 0,
    samples: int = 20000,
) -> Proposal:
    """The mixture minimising `predict` (+ kl_weight * KL to `prior`) with w_j <= caps[j].
    With kl_weight > 0 a source the prior gives nothing stays at 0: any weight on it is an
    infinite divergence."""
    shares, upper = _checked(prior, caps, kl_weight)
    generator = np.random.default_rng(seed)

    def evaluate(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        predicted = np.asarray(predict(points.tolist()), dtype=float)
        total = predicted + kl_weight * _divergence(points, shares) if kl_weight > 0 else predicted
        return predicted, np.where(np.isfinite(total), total, np.inf)

    allowed = (upper > 0).astype(float)
    spread = samples // 2 // (len(CONCENTRATIONS) + 1)
    first = _project(
        np.vstack(
            [shares, allowed / allowed.sum(), _corners(upper, generator)]
            + [_dirichlet(generator, scale * len(shares) * shares, spread) for scale in CONCENTRATIONS]
            + [_dirichlet(generator, allowed, spread)]
        ),
        upper,
    )
    _, objective = evaluate(first)
    centre = 0.95 * first[int(np.argmin(objective))] + 0.05 * allowed / allowed.sum()
    local = (samples - samples // 2) // len(LOCAL_CONCENTRATIONS)
    second = _project(
        np.vstack([_dirichlet(generator, scale * len(shares) * centre, local) for scale in LOCAL_CONCENTRATIONS]),
        upper,
    )
    candidates = np.vstack([first, second])
    objective = np.concatenate([objective, evaluate(second)[1]])
    order = np.argsort(objective, kind="stable")
    best, best_objective = candidates[order[0]], objective[order[0]]
    for index in order[:REFINED]:
        refined = _refine(evaluate, candidates[index], upper)
        value = evaluate(refined[None])[1][0]
        if value < best_objective:
            best, best_objective = refined, value
    predicted, objective = evaluate(best[None])
    return Proposal([float(weight) for weight in best], float(predicted[0]), float(objective[0]))


def _checked(prior: Sequence[float], caps: Sequence[float], kl_weight: float) -> tuple[np.ndarray, np.ndarray]:
    """The prior as shares, and each source's largest weight; or a ValueError of one line."""
    if len(prior) != len(caps) or not len(prior):
        raise ValueError(f"a prior of {len(prior)} sources and {len(caps)} caps: give one of each per source")
    shares, limits = np.asarray(prior, dtype=float), np.asarray(caps, dtype=float)
    if not np.isfinite(shares).all() or (shares < 0).any() or shares.sum() <= 0:
        raise ValueError(f"the prior {list(prior)} is not a mixture: its weights must be >= 0, and some > 0")
    if np.isnan(limits).any() or (limits < 0).any():
        raise ValueError(f"the caps {list(caps)} must be numbers >= 0")
    if not (math.isfinite(kl_weight) and kl_weight >= 0):
        raise ValueError(f"kl_weight must be a number >= 0, not {kl_weight}")
    if not feasible(caps):
        raise ValueError(
            f"the caps sum to {sum(min(cap, 1.0) for cap in caps):.4g} < 1: the sources hold too few tokens for a run "
            "of this size at this repetition cap, so no mixture keeps every source under it"
        )
    shares = shares / shares.sum()
    upper = np.minimum(limits, 1.0)
    if kl_weight > 0:
        upper[shares == 0] = 0.0
        if upper.sum() < 1.0:
            raise ValueError(
                f"with kl_weight > 0 the sources the prior gives 0 must stay at 0, and the others' caps sum to "
                f"{upper.sum():.4g} < 1: give them some prior weight or set kl_weight to 0"
            )
    return shares, upper


def _divergence(points: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """KL(w || prior) of each row, 0 log 0 taken as 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(points > 0, points * np.log(points / shares), 0.0)
    return terms.sum(axis=1)


def _dirichlet(generator: np.random.Generator, shapes: np.ndarray, count: int) -> np.ndarray:
    """`count` Dirichlet draws from gammas, so that a source of shape 0 gets weight 0 (numpy's
    own Dirichlet refuses shapes of 0); draws whose gammas all underflow are dropped."""
    gammas = generator.standard_gamma(np.broadcast_to(shapes, (count, len(shapes))))
    totals = gammas.sum(axis=1)
    return gammas[totals > 0] / totals[totals > 0, None]


def _corners(upper: np.ndarray, generator: np.random.Generator) -> np.ndarray:
    """Greedy fills, each source in turn up to its cap until the mixture is whole: the
    corners of the capped simplex, where the minimum of a law linear in the weights lies."""
    count = len(upper)
    if math.factorial(count) <= MAX_ORDERS:
        orders = np.array(list(itertools.permutations(range(count))), dtype=int)
    else:
        orders = np.array([generator.permutation(count) for _ in range(MAX_ORDERS)], dtype=int)
    filled = upper[orders]
    before = np.cumsum(filled, axis=1) - filled
    weights = np.zeros_like(filled)
    np.put_along_axis(weights, orders, np.clip(1.0 - before, 0.0, filled), axis=1)
    return np.unique(weights, axis=0)


def _project(points: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """The nearest mixtures with 0 <= w_j <= upper_j: clip(x - tau, 0, upper) with tau, found by
    bisection, such that the weights sum to 1."""
    low, high = (points - upper).min(axis=1), points.max(axis=1)
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        over = np.clip(points - middle[:, None], 0.0, upper).sum(axis=1) > 1.0
        low, high = np.where(over, middle, low), np.where(over, high, middle)
    return np.clip(points - ((low + high) / 2)[:, None], 0.0, upper)


def _refine(
    evaluate: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], start: np.ndarray, upper: np.ndarray
) -> np.ndarray:
    """SLSQP from `start` within the caps, its answer projected back onto them. The gradient
    is a forward difference (backward at a cap), all k + 1 points in one call of the law."""
    fixed = upper == 0

    def objective(weights: np.ndarray) -> float:
        return float(evaluate(np.clip(weights, 0.0, upper)[None])[1][0])

    def gradient(weights: np.ndarray) -> np.ndarray:
        base = np.clip(weights, 0.0, upper)
        steps = np.where(base + STEP > upper, -STEP, STEP)
        values = evaluate(np.vstack([base, base + np.diag(steps)]))[1]
        slopes = (values[1:] - values[0]) / steps
        return np.where(fixed | ~np.isfinite(slopes), 0.0, slopes)

    result = minimize(
        objective,
        start,
        jac=gradient,
        method="SLSQP",
        bounds=list(zip(np.zeros_like(upper), upper)),
        constraints=[
            {"type": "eq", "fun": lambda weights: weights.sum() - 1.0, "jac": lambda weights: np.ones_like(weights)}
        ],
        options={"maxiter": 200, "ftol": 1e-12},
    )
    return _project(result.x[None], upper)[0]
