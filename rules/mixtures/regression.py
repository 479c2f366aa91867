"""Regressions from a swarm's mixtures to its target loss, the laws a mixture is chosen by.

- `log_linear`: loss = c + exp(sum_j t_j w_j), the mixing law of Ye et al., "Data Mixing
  Laws" (2024), which Olmix fits per task (its `mixing_law`). Their constant b of
  exp(b + t.w) is folded into t, since the weights sum to 1. Convex in w, so the proposer's
  local search finds its minimum; few parameters (k + 1), so a swarm of a few dozen runs
  pins it down.
- `lightgbm`: gradient-boosted trees, RegMix's regression (Liu et al. 2024), which assumes
  no form but needs many runs and predicts a piecewise-constant loss.

Every fit is a pure function of its inputs, the same floats on one machine: the log-linear
starts come from a fixed grid (no random draws), LightGBM runs deterministic on one thread,
and the bootstrap's resamples come from a generator seeded by `seed`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import least_squares

REGRESSIONS: tuple[str, ...] = ("log_linear", "lightgbm")

# The log-linear fit starts c at these fractions of the smallest loss, each with the t that
# fits log(loss - c) = t.w by linear least squares, and keeps the best of the fits from them:
# on synthetic tables of 2-6 sources, laws and not, four starts found the best fit of ten.
FLOOR_FRACTIONS = (0.0, 0.5, 0.9, 0.99)

# RegMix (regression_fitting/regression.ipynb, and Olmix's LGBM_HPS) fitted 512 runs with
# LightGBM's defaults (31 leaves, at least 20 rows a leaf) at learning rate 0.01 for up to
# 10,000 rounds, stopped early on the training set's own l2. A swarm here has 16-100 runs: at
# 20 rows a leaf its trees could barely split. Here: leaves of at least 2 rows (1 fits a run's
# noise), at most 4 leaves a tree, 200 rounds at 0.05 and no early stopping (no held-out runs to
# stop on); bins of a row each, since 16 rows cannot fill LightGBM's default of 3. On synthetic
# swarms of 16-64 runs of 3 and 6 sources, 8 leaves, 1-3 rows a leaf, rates of 0.05-0.1 and
# 100-300 rounds all gave leave-one-out errors within 10% of these settings'.
LIGHTGBM_PARAMS: dict[str, Any] = {
    "objective": "regression",
    "learning_rate": 0.05,
    "num_leaves": 4,
    "min_data_in_leaf": 2,
    "min_data_in_bin": 1,
    "deterministic": True,
    "force_row_wise": True,
    "num_threads": 1,
    "verbosity": -1,
}
LIGHTGBM_ROUNDS = 200


@dataclass(frozen=True)
class Fitted:
    """A fitted regression. `parameters` is what fit.json shows of it: the law's constants
    for log_linear; for lightgbm, its settings and each source's share of the trees' gain
    (the trees themselves are `model`, not written out)."""

    kind: str
    parameters: dict[str, Any]
    model: Any = field(default=None, repr=False, compare=False)

    def predict(self, weights: Sequence[Sequence[float]]) -> list[float]:
        if not len(weights):
            return []
        sources = len(self.parameters["t"]) if self.kind == "log_linear" else self.model.num_feature()
        points = np.asarray(weights, dtype=float)
        if points.ndim != 2 or points.shape[1] != sources:
            raise ValueError(
                f"the {self.kind} law was fitted on {sources} sources: give it {sources} weights a mixture"
            )
        if self.kind == "log_linear":
            return [
                float(value) for value in _log_linear(points, self.parameters["c"], np.asarray(self.parameters["t"]))
            ]
        return [float(value) for value in self.model.predict(points)]


def fit(kind: str, weights: Sequence[Sequence[float]], losses: Sequence[float], seed: int = 0) -> Fitted:
    """The regression `kind` of `losses` on the mixtures `weights` (a row per run)."""
    points, values = _table(kind, weights, losses)
    return _fit(kind, points, values, seed)


def leave_one_out(kind: str, weights: Sequence[Sequence[float]], losses: Sequence[float], seed: int = 0) -> list[float]:
    """Each run's loss as predicted by a fit on the other runs: the error of a law on a
    mixture it has not seen, which in-sample errors understate (trees fit any table)."""
    points, values = _table(kind, weights, losses)
    keep = np.ones(len(values), dtype=bool)
    predicted = []
    for index in range(len(values)):
        keep[index] = False
        predicted.append(_fit(kind, points[keep], values[keep], seed).predict(points[index : index + 1])[0])
        keep[index] = True
    return predicted


def bootstrap(
    kind: str,
    weights: Sequence[Sequence[float]],
    losses: Sequence[float],
    at: Sequence[Sequence[float]],
    resamples: int,
    seed: int,
) -> list[list[float]]:
    """Per resample of the runs (drawn with replacement), the predictions at `at` of a fit on
    it: their spread is how much the prediction depends on which runs the swarm happened to
    train."""
    points, values = _table(kind, weights, losses)
    generator = np.random.default_rng(seed)
    samples = []
    for _ in range(resamples):
        drawn = generator.integers(0, len(values), size=len(values))
        samples.append(_fit(kind, points[drawn], values[drawn], seed).predict(at))
    return samples


def _table(kind: str, weights: Sequence[Sequence[float]], losses: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The runs as arrays, or a ValueError of one line saying what is wrong with them."""
    if kind not in REGRESSIONS:
        raise ValueError(f"unknown regression {kind!r}: expected one of {', '.join(REGRESSIONS)}")
    if len(weights) != len(losses):
        raise ValueError(f"{len(weights)} mixtures but {len(losses)} losses: a regression needs one loss per mixture")
    widths = {len(row) for row in weights}
    if len(widths) > 1 or not widths or widths == {0}:
        raise ValueError(f"the mixtures have {sorted(widths)} sources: every run must weigh the same sources")
    points, values = np.asarray(weights, dtype=float), np.asarray(losses, dtype=float)
    sources = points.shape[1]
    if len(values) < sources + 1:
        raise ValueError(f"{len(values)} runs cannot fit a law of {sources} sources: it needs at least {sources + 1}")
    if not np.isfinite(values).all():
        raise ValueError(f"the losses of runs {np.flatnonzero(~np.isfinite(values)).tolist()} are not finite numbers")
    if kind == "log_linear" and values.min() <= 0:
        raise ValueError(f"log_linear fits positive losses (c + exp(t.w) > 0), but the smallest is {values.min():g}")
    off = ~np.isfinite(points).all(axis=1) | (points < 0).any(axis=1) | (np.abs(points.sum(axis=1) - 1) > 1e-6)
    if off.any():
        raise ValueError(f"the weights of runs {np.flatnonzero(off).tolist()} are not mixtures (>= 0, summing to 1)")
    return points, values


def _fit(kind: str, points: np.ndarray, values: np.ndarray, seed: int) -> Fitted:
    """A fit without the count check: a left-out or resampled table may have fewer runs (or
    fewer distinct runs) than the law has parameters; its least-squares answer is then one of
    many, and its errors show it."""
    return _fit_log_linear(points, values) if kind == "log_linear" else _fit_lightgbm(points, values, seed)


def _log_linear(points: np.ndarray, c: float, t: np.ndarray) -> np.ndarray:
    return c + np.exp(points @ t)


def _fit_log_linear(points: np.ndarray, values: np.ndarray) -> Fitted:
    """Least squares of c + exp(t.w) with c in [0, min loss]. For a fixed c the law is linear
    in log space, so each start is the best t for its c, and the fit of c and t together starts
    near an answer; Olmix instead runs L-BFGS on a Huber loss from 300 random starts."""
    floor = float(values.min())

    def residuals(theta: np.ndarray) -> np.ndarray:
        return _log_linear(points, theta[0], theta[1:]) - values

    def jacobian(theta: np.ndarray) -> np.ndarray:
        return np.column_stack([np.ones(len(values)), np.exp(points @ theta[1:])[:, None] * points])

    fits = []
    for fraction in FLOOR_FRACTIONS:
        c = fraction * floor
        t = np.linalg.lstsq(points, np.log(values - c), rcond=None)[0]
        fits.append(
            least_squares(
                residuals,
                np.concatenate([[c], t]),
                jac=jacobian,
                bounds=([0.0] + [-np.inf] * len(t), [floor] + [np.inf] * len(t)),
                method="trf",
                x_scale="jac",
                ftol=1e-12,
                xtol=1e-12,
                gtol=1e-12,
                max_nfev=2000,
            )
        )
    theta = min(fits, key=lambda result: result.cost if math.isfinite(result.cost) else math.inf).x
    return Fitted(
        "log_linear", {"form": "c + exp(sum_j t_j w_j)", "c": float(theta[0]), "t": [float(v) for v in theta[1:]]}
    )


def _fit_lightgbm(points: np.ndarray, values: np.ndarray, seed: int) -> Fitted:
    """LightGBM's own API, not its scikit-learn wrapper: the same trees without scikit-learn."""
    import lightgbm

    params = {**LIGHTGBM_PARAMS, "seed": seed}
    booster = lightgbm.train(params, lightgbm.Dataset(points, values), num_boost_round=LIGHTGBM_ROUNDS)
    gain = booster.feature_importance(importance_type="gain")
    total = float(gain.sum())
    return Fitted(
        "lightgbm",
        {
            "settings": {**params, "rounds": LIGHTGBM_ROUNDS},
            "gain": [float(value) / total if total > 0 else 0.0 for value in gain],
        },
        booster,
    )
