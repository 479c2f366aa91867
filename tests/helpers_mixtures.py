"""A swarm's table whose losses are a known function of the weights, and the settings of a
fit of it: for the tests of the mixture fit and of the mixture page."""

from __future__ import annotations

import math
import random

from rules.mixtures.fit import Settings

SOURCES = ["a", "b", "c"]
# Two evaluation sets, each with a log-linear law whose best corner is another source: the
# target, their mean, is best half-way between a and b, with none of c.
LAWS = {"set_a": (2.0, [-1.5, 0.0, 0.5]), "set_b": (2.0, [0.0, -1.5, 0.5])}


def law_loss(law: tuple[float, list[float]], weights: list[float]) -> float:
    floor, slopes = law
    return floor + math.exp(0.5 + sum(slope * weight for slope, weight in zip(slopes, weights)))


def known_table(runs: int = 24, source_tokens: int = 10_000, run_tokens: int = 10_000) -> dict:
    generator = random.Random(3)
    rows = []
    for index in range(runs):
        gammas = [generator.gammavariate(1.0, 1.0) for _ in SOURCES]
        weights = [value / sum(gammas) for value in gammas]
        losses = {name: law_loss(law, weights) for name, law in LAWS.items()}
        rows.append(
            {
                "run": f"swarm-{index:03d}",
                "mixture": f"//exp:swarm-{index:03d}-mixture",
                "weights": weights,
                "losses": losses,
            }
        )
    return {
        "sources": SOURCES,
        "labels": [f"//exp:{name}_tokens" for name in SOURCES],
        "evals": list(LAWS),
        "prior": {name: 1 / 3 for name in SOURCES},
        "source_tokens": {name: source_tokens for name in SOURCES},
        "run_tokens": run_tokens,
        "max_repetition": 4.0,
        "runs": rows,
    }


def fit_settings(**fields: object) -> Settings:
    values = {
        "regression": "log_linear",
        "target": {"set_a": 1.0, "set_b": 1.0},
        "kl_weight": 0.0,
        "max_repetition": 4.0,
        "run_tokens": 10_000,
        "seed": 0,
        "bootstrap": 20,
    }
    return Settings(**{**values, **fields})  # type: ignore[arg-type]
