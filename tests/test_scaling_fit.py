"""The scaling-law fit on synthetic runs drawn from known laws: no training involved."""

from __future__ import annotations

import math

import numpy as np
import pytest

from marinbuild.targets.context import StepFailed
from rules import scaling_fit
from rules.scaling_fit import Run, Settings

# The truth the synthetic runs follow: D*(C) = A C^alpha, L*(C) = E + B C^-beta, and
# around D* a parabola in log10(tokens) of curvature K.
ALPHA, A = 0.55, 0.08
E, B, BETA = 1.8, 40.0, 0.12
K = 0.35
BUDGETS = [1e16, 1e17, 1e18, 1e19, 1e20]


def synthetic_runs(
    budgets=BUDGETS, offsets=(-0.6, -0.3, 0.0, 0.3, 0.6), noise: float = 0.0, seed: int = 0
) -> list[Run]:
    rng = np.random.default_rng(seed)
    runs = []
    for budget in budgets:
        x_star = math.log10(A * budget**ALPHA)
        for index, offset in enumerate(offsets):
            x = x_star + offset + 0.05  # the sweep is not centred on the optimum
            loss = E + B * budget**-BETA + K * (x - x_star) ** 2 + rng.normal(0, noise)
            runs.append(Run(f"//s:{budget:.0e}-{index}", budget, 10**x, budget, float(loss)))
    return runs


def test_recovers_the_laws_it_was_drawn_from() -> None:
    fit = scaling_fit.fit(synthetic_runs(noise=0.003), [], [1e22], Settings(bootstrap=200))
    assert fit["tokens_law"]["alpha"] == pytest.approx(ALPHA, abs=0.02)
    assert fit["tokens_law"]["A"] == pytest.approx(A, rel=0.5)  # A is 10^intercept: far from the data
    law = fit["loss_law"]
    assert law["beta"] == pytest.approx(BETA, abs=0.03)
    assert law["E"] == pytest.approx(E, abs=0.1)
    assert all(budget["minimum_inside"] and budget["used"] for budget in fit["budgets"])
    # The forecast 100x beyond the largest budget: tokens and loss near the truth, and the
    # truth inside the 95% interval.
    (forecast,) = fit["forecasts"]
    truth_tokens, truth_loss = A * 1e22**ALPHA, E + B * 1e22**-BETA
    assert forecast["optimal_tokens"] == pytest.approx(truth_tokens, rel=0.1)
    assert forecast["loss"] == pytest.approx(truth_loss, rel=0.005)
    low, high = forecast["loss_ci"]
    assert low <= truth_loss <= high and high - low < 0.1
    low, high = fit["tokens_law"]["alpha_ci"]
    assert low < ALPHA < high


def test_the_robust_fit_ignores_an_outlier() -> None:
    runs = synthetic_runs()
    # A run that diverged: far above its parabola, next to the optimum of its budget.
    bad = runs[7]
    runs[7] = Run(bad.label, bad.budget, bad.tokens, bad.flops, bad.loss + 0.5)
    robust = scaling_fit.fit(runs, [], [], Settings(bootstrap=0))
    plain = scaling_fit.fit(runs, [], [], Settings(bootstrap=0, huber_delta=1e3))  # Huber this wide is least squares
    budget = bad.budget
    truth = A * budget**ALPHA

    def optimum(fit) -> float:
        return next(entry["optimal_tokens"] for entry in fit["budgets"] if entry["budget"] == budget)

    assert optimum(robust) == pytest.approx(truth, rel=0.05)
    # Least squares, by contrast, is thrown: its parabola loses its minimum, or moves it far.
    assert optimum(plain) is None or abs(math.log10(optimum(plain) / truth)) > 5 * abs(
        math.log10(optimum(robust) / truth)
    )
    assert robust["tokens_law"]["alpha"] == pytest.approx(ALPHA, abs=0.005)
    outlier = next(run for run in robust["runs"] if run["label"] == bad.label)
    assert outlier["residual"] == pytest.approx(0.5, abs=0.02)


def test_held_out_runs_are_compared_with_their_forecast() -> None:
    held_budget = 1e21
    held = Run("//s:held", held_budget, A * held_budget**ALPHA, held_budget, E + B * held_budget**-BETA + 0.01)
    fit = scaling_fit.fit(synthetic_runs(noise=0.002), [held], [1e22], Settings(bootstrap=100))
    (check,) = fit["held_out"]
    assert check["relative_error"] == pytest.approx(0.01 / check["forecast_loss"], abs=2e-3)
    assert check["tokens_ratio"] == pytest.approx(1.0, rel=0.1)
    assert [forecast["budget"] for forecast in fit["forecasts"]] == [1e21, 1e22]


def test_a_minimum_outside_the_sweep_is_reported_and_left_out() -> None:
    runs = synthetic_runs()
    # The smallest budget's candidates all lie above its optimum: the fitted minimum falls
    # outside the sweep, so that budget is reported and the laws use the four others.
    shifted = [run for run in synthetic_runs(budgets=[BUDGETS[0]], offsets=(0.9, 1.1, 1.3, 1.5))]
    runs = [run for run in runs if run.budget != BUDGETS[0]] + shifted
    fit = scaling_fit.fit(runs, [], [], Settings(bootstrap=0))
    first = next(entry for entry in fit["budgets"] if entry["budget"] == BUDGETS[0])
    assert not first["minimum_inside"] and not first["used"]
    assert any("outside the sweep" in warning for warning in fit["warnings"])
    assert fit["tokens_law"]["alpha"] == pytest.approx(ALPHA, abs=0.01)


def test_a_fit_needs_two_budgets_with_a_minimum() -> None:
    # Concave: loss highest mid-sweep, as when every candidate is far from the optimum and noisy.
    flat = [
        Run(f"//s:{i}", budget, 10 ** (8 + i), budget, 3.0 - 0.1 * (i - 1.5) ** 2)
        for budget in (1e17, 1e18)
        for i in range(4)
    ]
    with pytest.raises(StepFailed, match="convex"):
        scaling_fit.fit(flat, [], [], Settings(bootstrap=0))


def test_plots_are_drawn_from_the_fit_alone_and_reproducibly(tmp_path) -> None:
    from rules import scaling_plots

    held = Run("//s:held", 1e21, A * 1e21**ALPHA, 1e21, E + B * 1e21**-BETA)
    fit = scaling_fit.fit(synthetic_runs(noise=0.002), [held], [1e22], Settings(bootstrap=20))
    for draw in (scaling_plots.isoflops, scaling_plots.scaling):
        first, second = tmp_path / f"{draw.__name__}-1.png", tmp_path / f"{draw.__name__}-2.png"
        draw(fit, first)
        draw(fit, second)
        assert first.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and first.stat().st_size > 10_000
        assert first.read_bytes() == second.read_bytes()
