"""The regressions (rules/mixtures/regression.py) and the proposer (proposer.py) on laws
whose answers are known: a log-linear law (Data Mixing Laws, Olmix) is recovered from a
swarm and its minimum found, at a corner of the simplex or of the caps; a bowl's minimum
inside the simplex is found, or the nearest point under a cap; the pull towards the prior
grows with its weight; leave-one-out predictions come from fits without the run; LightGBM
(RegMix) and the proposer give the same answer for the same seed."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from rules.mixtures.draws import feasible
from rules.mixtures.proposer import propose
from rules.mixtures.regression import REGRESSIONS, bootstrap, fit, leave_one_out

FLOOR, SLOPES = 2.0, [0.5, -0.3, 0.1]


def _law(weights: list[list[float]], slopes: list[float] = SLOPES) -> list[float]:
    return [FLOOR + math.exp(sum(slope * weight for slope, weight in zip(slopes, row))) for row in weights]


def _swarm(runs: int, sources: int = 3, seed: int = 0) -> list[list[float]]:
    """Mixtures drawn uniformly from the simplex."""
    generator = random.Random(seed)
    rows = []
    for _ in range(runs):
        gammas = [generator.gammavariate(1.0, 1.0) for _ in range(sources)]
        rows.append([value / sum(gammas) for value in gammas])
    return rows


def _noisy(weights: list[list[float]], scale: float = 1e-5) -> list[float]:
    """The law's losses with a tiny noise that is the same on every run of the tests."""
    return [loss + scale * math.sin(7.0 * index) for index, loss in enumerate(_law(weights))]


def _bowl(centre: list[float], curvature: list[float]):
    """1 + sum_j a_j (w_j - m_j)^2: on the simplex its minimum is m where m is a mixture."""

    def predict(weights: list[list[float]]) -> list[float]:
        return [1.0 + sum(a * (w - m) ** 2 for a, w, m in zip(curvature, row, centre)) for row in weights]

    return predict


def _assert_mixture(weights: list[float], caps: list[float]) -> None:
    assert sum(weights) == pytest.approx(1.0, abs=1e-9)
    assert all(0.0 <= weight <= cap + 1e-9 for weight, cap in zip(weights, caps))


def test_a_log_linear_fit_recovers_a_known_law_and_the_proposal_its_minimum() -> None:
    weights = _swarm(20)
    fitted = fit("log_linear", weights, _noisy(weights))
    unseen = _swarm(50, seed=1)
    assert np.abs(np.array(fitted.predict(unseen)) - np.array(_law(unseen))).max() < 1e-3
    assert fitted.parameters["c"] == pytest.approx(FLOOR, abs=0.05)
    assert fitted.parameters["t"] == pytest.approx(SLOPES, abs=0.05)
    assert fit("log_linear", weights, _noisy(weights)) == fitted  # the same floats, bit for bit
    # exp(t.w) is least where t.w is: at the source of the smallest slope, or, with that source
    # capped at 0.4, filled to its cap and the rest from the source of the next smallest (0.1).
    for caps, expected in (([1.0, 1.0, 1.0], [0.0, 1.0, 0.0]), ([1.0, 0.4, 1.0], [0.0, 0.4, 0.6])):
        proposal = propose(fitted.predict, [1 / 3] * 3, caps)
        assert proposal.weights == pytest.approx(expected, abs=1e-6)
        _assert_mixture(proposal.weights, caps)
        assert proposal.predicted == pytest.approx(_law([expected])[0], abs=1e-3)
        assert proposal.objective == proposal.predicted


def test_the_proposal_finds_a_minimum_inside_the_simplex() -> None:
    centre = [0.1, 0.4, 0.3, 0.2]
    proposal = propose(_bowl(centre, [1.0, 2.0, 3.0, 4.0]), [0.25] * 4, [1.0] * 4)
    assert proposal.weights == pytest.approx(centre, abs=1e-3)
    assert proposal.predicted == pytest.approx(1.0, abs=1e-6)


def test_the_proposal_keeps_every_source_under_its_cap() -> None:
    # The free minimum gives source 0 0.6; capped at 0.3, the nearest mixture splits the rest.
    # Caps over 1, summing to more than 1, are no constraint at all.
    caps = [0.3, 1.0, 2.5]
    proposal = propose(_bowl([0.6, 0.2, 0.2], [1.0, 1.0, 1.0]), [1 / 3] * 3, caps)
    assert proposal.weights == pytest.approx([0.3, 0.35, 0.35], abs=1e-3)
    _assert_mixture(proposal.weights, caps)
    # Caps that leave a single mixture: it is the proposal.
    assert propose(_law, [1 / 3] * 3, [0.5, 0.0, 0.5]).weights == pytest.approx([0.5, 0.0, 0.5], abs=1e-9)


def test_a_law_low_only_at_a_corner_of_the_caps_is_proposed_there() -> None:
    # A tree's law is flat almost everywhere: neither random draws nor a local search find a
    # minimum confined to a corner of the capped simplex, the greedy fills do; and the local
    # search, which steps off it to a worse point, must not be followed.
    corner = [0.0, 0.4, 0.6]

    def spike(weights: list[list[float]]) -> list[float]:
        return [1.0 if max(abs(w - c) for w, c in zip(row, corner)) < 1e-9 else 2.0 for row in weights]

    proposal = propose(spike, [1 / 3] * 3, [1.0, 0.4, 1.0])
    assert proposal.weights == pytest.approx(corner, abs=1e-9) and proposal.predicted == 1.0


def test_a_law_of_nested_plateaus_is_searched_down_to_its_smallest() -> None:
    # Like a tree's: flat but for a plateau, and a smaller one inside it, away from the prior.
    # The first draws land on the large plateau; the draws around the best of them, on the small one.
    centre = [0.15, 0.25, 0.6]

    def plateaus(weights: list[list[float]]) -> list[float]:
        distances = [max(abs(w - c) for w, c in zip(row, centre)) for row in weights]
        return [1.0 if distance < 0.002 else 1.5 if distance < 0.05 else 2.0 for distance in distances]

    proposal = propose(plateaus, [1 / 3] * 3, [1.0] * 3)
    assert proposal.predicted == 1.0 and proposal.weights == pytest.approx(centre, abs=0.002)


def test_a_pull_towards_the_prior_moves_the_proposal_to_it_as_it_grows() -> None:
    prior = [0.5, 0.3, 0.2]
    distances = []
    for kl_weight in (0.0, 0.1, 1.0, 10.0, 100.0):
        proposal = propose(_law, prior, [1.0] * 3, kl_weight=kl_weight)
        _assert_mixture(proposal.weights, [1.0] * 3)
        kl = sum(w * math.log(w / p) for w, p in zip(proposal.weights, prior) if w > 0)
        assert proposal.objective == pytest.approx(proposal.predicted + kl_weight * kl, rel=1e-9)
        distances.append(sum(abs(w - p) for w, p in zip(proposal.weights, prior)))
    assert distances == sorted(distances, reverse=True) and len(set(distances)) == len(distances)
    assert distances[0] == pytest.approx(1.4, abs=1e-6)  # no pull: the corner [0, 1, 0]
    assert distances[-1] < 0.01
    # A source the prior gives nothing: any weight on it is an infinite divergence.
    best_is_last = _bowl([0.0, 0.0, 1.0], [1.0, 1.0, 1.0])
    assert propose(best_is_last, [0.5, 0.5, 0.0], [1.0] * 3).weights[2] == pytest.approx(1.0, abs=1e-6)
    assert propose(best_is_last, [0.5, 0.5, 0.0], [1.0] * 3, kl_weight=0.01).weights[2] == 0.0


def test_caps_that_leave_no_mixture_fail_in_one_line() -> None:
    assert feasible([0.5, 0.5]) and feasible([3.0, 0.0]) and not feasible([0.3, 0.3, 0.3])
    with pytest.raises(ValueError, match=r"^the caps sum to 0.9 < 1: the sources hold too few tokens") as error:
        propose(_law, [1 / 3] * 3, [0.3, 0.3, 0.3])
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match=r"the sources the prior gives 0 must stay at 0"):
        propose(_law, [0.5, 0.5, 0.0], [0.3, 0.3, 1.0], kl_weight=1.0)


def test_leave_one_out_predicts_each_run_from_a_fit_without_it() -> None:
    weights = _swarm(16)
    losses = _noisy(weights)
    losses[5] += 0.05  # a run far off the law: a fit with it leans towards it, one without does not
    held_out = leave_one_out("log_linear", weights, losses)
    assert len(held_out) == len(weights)
    for index in (0, 5, 15):
        others = [row for position, row in enumerate(weights) if position != index]
        rest = [loss for position, loss in enumerate(losses) if position != index]
        assert held_out[index] == fit("log_linear", others, rest).predict([weights[index]])[0]
    in_sample = fit("log_linear", weights, losses).predict([weights[5]])[0]
    truth = _law([weights[5]])[0]
    assert abs(held_out[5] - losses[5]) > abs(in_sample - losses[5]) + 0.005
    assert held_out[5] == pytest.approx(truth, abs=2e-3)


def test_lightgbm_fits_the_same_trees_twice_and_its_proposal_stays_under_the_caps() -> None:
    weights = _swarm(40)
    losses = _noisy(weights, scale=0.01)
    first, second = fit("lightgbm", weights, losses, seed=3), fit("lightgbm", weights, losses, seed=3)
    unseen = _swarm(30, seed=2)
    assert first.predict(unseen) == second.predict(unseen)
    assert first.parameters == second.parameters and sum(first.parameters["gain"]) == pytest.approx(1.0)
    in_sample = np.array(first.predict(weights))
    assert np.sqrt(np.mean((in_sample - losses) ** 2)) < 0.5 * np.std(losses)  # it learnt something
    held_out = leave_one_out("lightgbm", weights[:4], losses[:4])  # the fewest runs a law of 3 sources takes
    assert len(held_out) == 4 and all(math.isfinite(value) for value in held_out)

    prior, caps = [0.5, 0.3, 0.2], [0.6, 0.5, 1.0]
    proposal = propose(first.predict, prior, caps, seed=1, samples=4000)
    assert proposal == propose(first.predict, prior, caps, seed=1, samples=4000)
    _assert_mixture(proposal.weights, caps)
    # The prior and the uniform mixture are candidates: the proposal is predicted no worse.
    assert proposal.predicted <= min(first.predict([prior, [1 / 3] * 3]))
    assert proposal.predicted == first.predict([proposal.weights])[0]


def test_the_same_seed_gives_the_same_proposal() -> None:
    bumpy = _bowl([0.2, 0.2, 0.3, 0.3], [1.0, 5.0, 2.0, 3.0])
    args = (bumpy, [0.4, 0.3, 0.2, 0.1], [0.5, 0.5, 0.5, 0.5])
    assert propose(*args, kl_weight=0.5, seed=4) == propose(*args, kl_weight=0.5, seed=4)


def test_bootstrap_resamples_the_runs_with_a_seed() -> None:
    weights = _swarm(20)
    losses = _noisy(weights, scale=0.01)
    at = [[1 / 3] * 3, [0.0, 1.0, 0.0]]
    samples = bootstrap("log_linear", weights, losses, at, resamples=10, seed=0)
    assert len(samples) == 10 and all(len(sample) == 2 for sample in samples)
    assert samples == bootstrap("log_linear", weights, losses, at, resamples=10, seed=0)
    assert samples != bootstrap("log_linear", weights, losses, at, resamples=10, seed=1)
    spread = np.array(samples)
    assert (spread.std(axis=0) > 0).all()
    assert spread.mean(axis=0) == pytest.approx(_law(at), abs=0.02)


@pytest.mark.parametrize(
    ("kind", "weights", "losses", "message"),
    [
        ("gp", _swarm(5), [3.0] * 5, r"unknown regression 'gp': expected one of log_linear, lightgbm"),
        ("log_linear", _swarm(3), [3.0] * 3, r"3 runs cannot fit a law of 3 sources: it needs at least 4"),
        ("lightgbm", _swarm(5), [3.0] * 4, r"5 mixtures but 4 losses"),
        ("log_linear", [[0.5, 0.5]] * 2 + [[1.0, 0.0, 0.0]] * 2, [3.0] * 4, r"every run must weigh the same sources"),
        ("log_linear", _swarm(5), [3.0, math.nan, 3.0, math.inf, 3.0], r"the losses of runs \[1, 3\] are not finite"),
        ("log_linear", _swarm(4) + [[0.7, 0.7, 0.0]], [3.0] * 5, r"the weights of runs \[4\] are not mixtures"),
        ("log_linear", _swarm(5), [3.0, 2.0, 0.0, 1.0, 3.0], r"log_linear fits positive losses"),
    ],
)
def test_bad_input_fails_in_one_line(kind: str, weights: list, losses: list, message: str) -> None:
    assert set(REGRESSIONS) == {"log_linear", "lightgbm"}
    for call in (fit, leave_one_out):
        with pytest.raises(ValueError, match=message) as error:
            call(kind, weights, losses)
        assert "\n" not in str(error.value)
