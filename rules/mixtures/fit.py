"""A mixture law fitted on a swarm's table, and the mixture it proposes: `fit.json`.

The target loss of each run is one evaluation set's, or a weighted mean of several. The
regression (regression.py) is fitted on every run, and once without each run to measure
how well it predicts a run it has not seen (leave-one-out); the other regressions'
leave-one-out errors on the same table are reported beside it. The proposal (proposer.py)
minimises the predicted loss, plus an optional pull towards the prior, over the mixtures
whose repetition of every source stays under the cap for a run of `run_tokens`; its
interval is the spread of the predictions of fits on bootstrap resamples of the runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marinbuild.targets.context import StepFailed
from rules.mixtures import proposer, regression
from rules.mixtures.draws import Source, caps, check_room, mixture_record, repetition, rounded

INTERVAL = (0.05, 0.95)  # the proposal's predicted loss: a 90% bootstrap interval


@dataclass(frozen=True)
class Settings:
    """What fit_mixture asks for (its attributes, resolved against the table)."""

    regression: str
    target: Mapping[str, float]  # {evaluation set: weight}
    kl_weight: float
    max_repetition: float
    run_tokens: int
    seed: int
    bootstrap: int


def set_losses(table: Mapping[str, Any], target: Mapping[str, float]) -> dict[str, list[float]]:
    """Each target set's losses, a run each."""
    missing = [name for name in target if name not in table["evals"]]
    if missing:
        raise StepFailed(f"target names {missing}, which the swarm did not evaluate on (it did: {table['evals']})")
    return {name: [row["losses"][name] for row in table["runs"]] for name in target}


def mean(target: Mapping[str, float], by_set: Mapping[str, Sequence[float]]) -> list[float]:
    """The target's loss: the weighted mean of its sets' losses (or predictions), item by item."""
    total = sum(target.values())
    count = len(next(iter(by_set.values())))
    return [sum(weight * by_set[name][index] for name, weight in target.items()) / total for index in range(count)]


@dataclass(frozen=True)
class Law:
    """The target's law: a regression of each of its sets' losses, weighed as the target
    weighs them. A target of several sets has, like Olmix's mean over tasks, an optimum
    inside the simplex even where each set's law (log-linear) has it at a corner."""

    target: Mapping[str, float]
    fits: Mapping[str, regression.Fitted]

    def predict(self, weights: Sequence[Sequence[float]]) -> list[float]:
        return mean(self.target, {name: fitted.predict(weights) for name, fitted in self.fits.items()})


def _errors(actual: Sequence[float], predicted: Sequence[float]) -> dict[str, float]:
    relative = [abs(guess - loss) / loss for loss, guess in zip(actual, predicted)]
    return {
        "rmse": math.sqrt(sum((guess - loss) ** 2 for loss, guess in zip(actual, predicted)) / len(actual)),
        "mean_relative_error": sum(relative) / len(relative),
        "max_relative_error": max(relative),
    }


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def fit(table: Mapping[str, Any], settings: Settings) -> tuple[dict[str, Any], dict[str, Any]]:
    """(fit.json, the proposal's mixture.json) of `table` (table.py's swarm.json)."""
    names, target, seed = table["sources"], settings.target, settings.seed
    weights = [row["weights"] for row in table["runs"]]
    by_set = set_losses(table, target)
    losses = mean(target, by_set)
    if len(weights) < len(names) + 1:
        raise StepFailed(
            f"{len(weights)} runs cannot fit a law of {len(names)} sources: a swarm needs at least {len(names) + 1}"
        )

    def held_out(kind: str) -> list[float]:
        return mean(
            target, {name: regression.leave_one_out(kind, weights, found, seed) for name, found in by_set.items()}
        )

    try:
        law = Law(
            target, {name: regression.fit(settings.regression, weights, found, seed) for name, found in by_set.items()}
        )
        predicted = law.predict(weights)
        held = {kind: held_out(kind) for kind in regression.REGRESSIONS}
        compared = {kind: _errors(losses, predictions) for kind, predictions in held.items()}
        out_of_sample = held[settings.regression]
        sources = [Source(label, name, table["source_tokens"][name], "") for label, name in zip(table["labels"], names)]
        limits = caps(sources, settings.run_tokens, settings.max_repetition)
        check_room(sources, limits, settings.run_tokens, settings.max_repetition)
        prior = [table["prior"][name] for name in names]
        proposal = proposer.propose(law.predict, prior, limits, settings.kl_weight, seed)
        # The same resamples of the runs for every set (one seed), so the target's mean is taken per resample.
        resampled = (
            {
                name: [
                    sample[0]
                    for sample in regression.bootstrap(
                        settings.regression, weights, found, [proposal.weights], settings.bootstrap, seed
                    )
                ]
                for name, found in by_set.items()
            }
            if settings.bootstrap
            else {}
        )
    except ValueError as error:
        raise StepFailed(str(error)) from error
    proposed = rounded(proposal.weights)
    uniform = [1.0 / len(names)] * len(names)
    best = min(range(len(losses)), key=lambda index: losses[index])
    at_proposal = mean(target, resampled) if resampled else []
    found = {
        "regression": settings.regression,
        "parameters": {name: fitted.parameters for name, fitted in law.fits.items()},
        "target": dict(settings.target),
        "sources": names,
        "labels": table["labels"],
        "source_tokens": table["source_tokens"],
        "swarm_tokens": table["run_tokens"],
        "runs": [
            {"run": row["run"], "weights": row["weights"], "loss": loss, "predicted": guess, "loo_predicted": out}
            for row, loss, guess, out in zip(table["runs"], losses, predicted, out_of_sample)
        ],
        "loo": compared[settings.regression],
        "compared": compared,
        "proposal": {
            "weights": dict(zip(names, proposed)),
            "predicted": proposal.predicted,
            "interval": [_quantile(at_proposal, INTERVAL[0]), _quantile(at_proposal, INTERVAL[1])]
            if at_proposal
            else None,
            "repetition": dict(zip(names, repetition(proposed, sources, settings.run_tokens))),
        },
        "best_run": {
            "run": table["runs"][best]["run"],
            "mixture": table["runs"][best]["mixture"],
            "weights": dict(zip(names, weights[best])),
            "loss": losses[best],
            "predicted": predicted[best],
        },
        "prior": {"weights": dict(zip(names, prior)), "predicted": law.predict([prior])[0]},
        "uniform": {"weights": dict(zip(names, uniform)), "predicted": law.predict([uniform])[0]},
        "caps": dict(zip(names, limits)),
        "run_tokens": settings.run_tokens,
        "max_repetition": settings.max_repetition,
        "kl_weight": settings.kl_weight,
    }
    mixture = mixture_record(
        sources,
        proposed,
        prior,
        settings.run_tokens,
        settings.max_repetition,
        proposed_by=settings.regression,
        predicted=proposal.predicted,
    )
    return found, mixture


def picked(fit: Mapping[str, Any], which: str, run_tokens: int) -> dict[str, Any]:
    """mixture.json of a mixture the fit names (`proposal`, `best_run`, `prior`, `uniform`)
    for a run of `run_tokens`: what a validation run trains on."""
    names = fit["sources"]
    sources = [Source(label, name, fit["source_tokens"][name], "") for label, name in zip(fit["labels"], names)]
    weights = rounded([fit[which]["weights"][name] for name in names])
    prior = [fit["prior"]["weights"][name] for name in names]
    return mixture_record(sources, weights, prior, run_tokens, fit["max_repetition"], picked=which)
