"""The fit of a swarm's table (rules/mixtures/fit.py) on losses that are a known function of
the weights: it recovers the minimum it should, keeps the proposal under the repetition
cap, and sets each regression's leave-one-out error beside the fitted one's. And the draws:
the same seed gives the same mixtures, whatever the swarm's size."""

from __future__ import annotations

import math

import pytest
from helpers_mixtures import fit_settings, known_table

from marinbuild.targets.context import StepFailed
from rules.mixtures.draws import draw, rounded
from rules.mixtures.fit import fit, picked


def test_a_fit_on_a_known_law_recovers_its_minimum() -> None:
    found, mixture = fit(known_table(), fit_settings())
    proposal = found["proposal"]["weights"]
    assert proposal["a"] == pytest.approx(0.5, abs=0.01) and proposal["b"] == pytest.approx(0.5, abs=0.01)
    assert proposal["c"] == pytest.approx(0.0, abs=0.01)
    best = 2.0 + math.exp(0.5 - 0.75)
    assert found["proposal"]["predicted"] == pytest.approx(best, rel=1e-3)
    low, high = found["proposal"]["interval"]
    assert low <= found["proposal"]["predicted"] + 1e-6 and found["proposal"]["predicted"] - 1e-6 <= high
    # The law is exact: its leave-one-out error is tiny, and the proposal beats every run.
    assert found["loo"]["max_relative_error"] < 1e-3
    assert found["proposal"]["predicted"] < found["best_run"]["loss"]
    assert set(found["compared"]) >= {"log_linear", "lightgbm"}
    assert found["compared"]["lightgbm"]["rmse"] > found["compared"]["log_linear"]["rmse"]
    # mixture.json: what train_lm(mixture = ...) reads, keyed by the sources' labels.
    assert mixture["weights"] == {f"//exp:{name}_tokens": weight for name, weight in proposal.items()}
    assert sum(mixture["weights"].values()) == pytest.approx(1.0, abs=1e-9)


def test_the_proposal_keeps_every_source_under_the_repetition_cap() -> None:
    # Source a holds 750 tokens: a run of 10,000 at most 4 times over may give it 0.3.
    table = known_table()
    table["source_tokens"]["a"] = 750
    found, mixture = fit(table, fit_settings())
    assert found["caps"]["a"] == pytest.approx(0.3)
    assert found["proposal"]["weights"]["a"] == pytest.approx(0.3, abs=1e-3)
    assert found["proposal"]["weights"]["a"] <= 0.3 + 1e-6
    assert found["proposal"]["weights"]["b"] == pytest.approx(0.7, abs=0.01)
    assert max(mixture["repetition"].values()) <= 4.0 + 1e-3


def test_a_larger_run_tightens_the_cap_and_too_little_data_for_it_fails_in_one_line() -> None:
    found, _ = fit(known_table(), fit_settings(run_tokens=100_000))  # each source: at most 0.4
    assert all(weight <= 0.4 + 1e-6 for weight in found["proposal"]["weights"].values())
    with pytest.raises(StepFailed, match="no mixture fits: a run of 200000 tokens"):
        fit(known_table(), fit_settings(run_tokens=200_000))  # at most 0.2 each: no mixture sums to 1


def test_a_pull_towards_the_prior_moves_the_proposal_to_it() -> None:
    free, _ = fit(known_table(), fit_settings())
    pulled, _ = fit(known_table(), fit_settings(kl_weight=5.0))
    assert pulled["proposal"]["weights"]["c"] > free["proposal"]["weights"]["c"] + 0.05


def test_a_target_the_swarm_did_not_evaluate_fails_in_one_line() -> None:
    with pytest.raises(StepFailed, match=r"target names \['set_c'\]"):
        fit(known_table(), fit_settings(target={"set_c": 1.0}))


def test_the_references_a_validation_trains_come_from_the_fit() -> None:
    found, _ = fit(known_table(), fit_settings())
    best = picked(found, "best_run", 20_000)
    assert list(best["weights"].values()) == rounded(list(found["best_run"]["weights"].values()))
    assert best["run_tokens"] == 20_000 and best["picked"] == "best_run"
    assert list(picked(found, "uniform", 10_000)["weights"].values()) == pytest.approx([1 / 3] * 3, abs=1e-6)


def test_the_same_seed_draws_the_same_mixtures_whatever_the_swarm_size() -> None:
    prior, caps = [0.5, 0.3, 0.2], [1.0, 1.0, 0.5]
    first = [draw(prior, caps, 1.0, 7, index) for index in range(8)]
    assert first == [draw(prior, caps, 1.0, 7, index) for index in range(8)]
    assert first[:3] == [draw(prior, caps, 1.0, 7, index) for index in range(3)]
    assert len({tuple(weights) for weights, _ in first}) == 8
    assert first != [draw(prior, caps, 1.0, 8, index) for index in range(8)]  # another seed, other mixtures
    for weights, _attempts in first:
        assert sum(weights) == pytest.approx(1.0, abs=1e-9) and weights[2] <= 0.5
    # The bytes do not depend on the platform's last bits: six decimals.
    assert all(round(weight, 6) == weight for weights, _ in first for weight in weights)
