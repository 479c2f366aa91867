"""The scaling-law fit on synthetic runs drawn from known laws: no training involved."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from marinbuild.targets.context import StepFailed
from rules.scaling import fit as scaling_fit
from rules.scaling.fit import Settings
from rules.scaling.runs import Run

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
    assert check["loss"] == held.loss  # the runs' own numbers are published as measured
    assert check["relative_error"] == pytest.approx(0.01 / check["forecast_loss"], abs=2e-3)
    assert check["tokens_ratio"] == pytest.approx(1.0, rel=0.1)
    assert [forecast["budget"] for forecast in fit["forecasts"]] == [1e21, 1e22]


def test_the_seeds_of_a_held_out_budget_are_checked_as_their_mean() -> None:
    budget, truth = 1e21, E + B * 1e21**-BETA
    seeds = [
        Run(f"//s:held-s{seed}", budget, A * budget**ALPHA, budget, truth + delta)
        for seed, delta in enumerate((-0.01, 0.03))
    ]
    fit = scaling_fit.fit(synthetic_runs(noise=0.002), seeds, [], Settings(bootstrap=100))
    assert [run["label"] for run in fit["held_out"]] == ["//s:held-s0", "//s:held-s1"]
    (check,) = fit["held_out_budgets"]
    assert check["labels"] == ["//s:held-s0", "//s:held-s1"] and check["losses"] == [run.loss for run in seeds]
    assert check["loss"] == pytest.approx(truth + 0.01, abs=1e-5)
    assert check["loss_sd"] == pytest.approx(0.04 / math.sqrt(2), rel=1e-4)
    assert check["relative_error"] == pytest.approx(
        (check["loss"] - check["forecast_loss"]) / check["forecast_loss"], rel=1e-3
    )
    low, high = check["forecast_loss_ci"]
    assert check["within_ci"] == (low <= check["loss"] <= high)
    # The prediction interval adds the noise of a mean of two runs: wider than the law's.
    predicted_low, predicted_high = check["prediction_ci"]
    assert predicted_low < low and high < predicted_high
    assert check["within_prediction_ci"] == (predicted_low <= check["loss"] <= predicted_high)


def test_backtests_forecast_each_budget_from_the_others() -> None:
    fit = scaling_fit.fit(synthetic_runs(noise=0.002), [], [], Settings(bootstrap=0))
    tests = {test["budget"]: test for test in fit["backtests"]}
    assert sorted(tests) == BUDGETS
    for budget, test in tests.items():
        assert budget not in test["fitted_on"] and len(test["fitted_on"]) == len(BUDGETS) - 1
        assert abs(test["relative_error"]) < 0.01


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
    from rules.scaling import plots as scaling_plots

    held = Run("//s:held", 1e21, A * 1e21**ALPHA, 1e21, E + B * 1e21**-BETA)
    fit = scaling_fit.fit(synthetic_runs(noise=0.002), [held], [1e22], Settings(bootstrap=20))
    for draw in (scaling_plots.isoflops, scaling_plots.scaling):
        first, second = tmp_path / f"{draw.__name__}-1.png", tmp_path / f"{draw.__name__}-2.png"
        draw(fit, first)
        draw(fit, second)
        assert first.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and first.stat().st_size > 10_000
        assert first.read_bytes() == second.read_bytes()


def test_two_budgets_give_a_pure_power_law_that_the_last_bits_do_not_move() -> None:
    """Through two budgets, E + B C^-beta has infinitely many exact solutions; which one a
    search found used to depend on the last bits of its inputs (beta 0.56 on one machine,
    1.32 on another). The fit takes E = 0 there, a unique line in log-log, and says so."""
    runs = synthetic_runs(budgets=BUDGETS[:2])
    nudged = [Run(run.label, run.budget, run.tokens, run.flops, run.loss * (1 + 1e-15)) for run in runs]
    fits = [scaling_fit.fit(these, [], [1e20], Settings(bootstrap=50)) for these in (runs, nudged)]
    assert fits[0]["loss_law"]["E"] == 0.0
    assert fits[0]["loss_law"] == fits[1]["loss_law"] and fits[0]["forecasts"] == fits[1]["forecasts"]
    assert any("E is fixed at 0" in warning for warning in fits[0]["warnings"])


_FIT_IN_A_PROCESS = """
import json, random, sys
sys.path[:0] = {paths!r}
from test_scaling_fit import synthetic_runs
from rules.scaling import fit as scaling_fit
runs = synthetic_runs(noise=0.004, seed=3)
random.Random({order}).shuffle(runs)
fit = scaling_fit.fit(runs, [], [1e22], scaling_fit.Settings(bootstrap=300))
fit["runs"].sort(key=lambda run: run["label"])
sys.stdout.write(json.dumps(fit, indent=2))
"""


@pytest.mark.parametrize("threads", ["1", "2"])
def test_the_fit_is_the_same_bytes_whatever_the_threads_and_the_order_of_the_runs(threads: str) -> None:
    """fit.json is a pure function of the runs: no BLAS (whose kernels and threads vary
    between machines), sums that do not depend on order (math.fsum), a seeded bootstrap,
    and fitted numbers rounded to 6 significant digits."""
    tests, root = Path(__file__).resolve().parent, Path(__file__).resolve().parents[3]
    outputs = []
    for order, env_threads in ((0, "1"), (1, threads)):
        env = {
            **os.environ,
            **{name: env_threads for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")},
        }
        code = _FIT_IN_A_PROCESS.format(paths=[str(tests), str(root)], order=order)
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    fit = json.loads(outputs[0])
    assert fit["tokens_law"]["alpha"] == float(f"{fit['tokens_law']['alpha']:.5e}")  # 6 significant digits


def test_size_laws_in_both_parameter_counts() -> None:
    """With N = C / (6 D) (embeddings included) and a non-embedding count a fixed share of
    it, both size laws have the exponent 1 - alpha and agree with the tokens law."""
    runs = [
        Run(
            run.label,
            run.budget,
            run.tokens,
            run.flops,
            run.loss,
            run.budget / (6 * run.tokens),
            run.budget / (12 * run.tokens),
        )
        for run in synthetic_runs(noise=0.002)
    ]
    fit = scaling_fit.fit(runs, [], [1e22], Settings(bootstrap=50))
    for count, share in (("params", 6), ("non_embedding_params", 12)):
        law = fit["size_laws"][count]
        assert law["exponent"] == pytest.approx(1 - ALPHA, abs=0.02)
        low, high = law["exponent_ci"]
        assert low < law["exponent"] < high
        (forecast,) = fit["forecasts"]
        assert forecast["optimal_size"][count]["value"] == pytest.approx(
            1e22 / (share * forecast["optimal_tokens"]), rel=0.05
        )
    assert all(abs(test["log10_optimum_error"]["params"]) < 0.05 for test in fit["backtests"])
