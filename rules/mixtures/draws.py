"""A swarm run's mixture: a draw from a Dirichlet distribution around a prior, within a cap
on repetition (RegMix and Olmix draw their swarms so).

Each draw has a generator of its own, seeded by the swarm's seed and the draw's index, so
draw 7 is the same mixture whether the swarm has 16 runs or 24, and on every machine:
Python's `random.Random` of a string seed is specified (SHA-512 of it) and its Mersenne
Twister is the same everywhere; the weights are rounded to 6 decimals, so that a last-bit
difference of a platform's `log` cannot change the bytes of mixture.json.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fsspec

from marinbuild.targets.context import StepFailed
from rules.common.corpus import SUMMARY
from rules.common.training_files import TOKENIZER_DIR

DECIMALS = 6
MAX_ATTEMPTS = 100_000  # draws tried before a cap is said to leave too little room


@dataclass(frozen=True)
class Source:
    """A token cache a swarm mixes: its training tokens and its tokenizer's digest."""

    label: str
    name: str
    tokens: int
    tokenizer: str


def read_source(label: str, name: str, location: str) -> Source:
    """A tokenize output's training tokens (summary.json) and tokenizer (tokenizer.json)."""
    try:
        with fsspec.open(f"{location}/{SUMMARY}", "r") as file:
            tokens = json.load(file)["tokens"]["train"]
        with fsspec.open(f"{location}/{TOKENIZER_DIR}/tokenizer.json", "rb") as file:
            import blake3

            tokenizer = blake3.blake3(file.read()).hexdigest()
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise StepFailed(
            f"source {name} ({label}) is not a token cache (no summary.json with train tokens and tokenizer/): "
            "name a tokenize target"
        ) from error
    if not isinstance(tokens, int) or tokens <= 0:
        raise StepFailed(f"source {name} ({label}) holds no training tokens")
    return Source(label, name, tokens, tokenizer)


def check_one_tokenizer(sources: Sequence[Source]) -> None:
    """A mixture's sources share one vocabulary: token ids of two tokenizers do not mix."""
    by_tokenizer: dict[str, list[str]] = {}
    for source in sources:
        by_tokenizer.setdefault(source.tokenizer, []).append(source.name)
    if len(by_tokenizer) > 1:
        groups = "; ".join(", ".join(names) for names in by_tokenizer.values())
        raise StepFailed(
            f"the sources are token caches of {len(by_tokenizer)} tokenizers ({groups}): tokenize them alike"
        )


def prior_shares(prior: str | Mapping[str, float], sources: Sequence[Source]) -> list[float]:
    """The prior as a share of each source: their token counts ("tokens", Olmix's natural
    distribution), equal shares ("uniform"), or shares given by name (normalised)."""
    if prior == "tokens":
        raw = [float(source.tokens) for source in sources]
    elif prior == "uniform":
        raw = [1.0] * len(sources)
    else:
        assert isinstance(prior, Mapping)
        raw = [float(prior.get(source.name, 0.0)) for source in sources]
    total = sum(raw)
    return [value / total for value in raw]


def caps(sources: Sequence[Source], run_tokens: int, max_repetition: float) -> list[float]:
    """The most weight each source may take: a run of `run_tokens` must not see any source's
    tokens more than `max_repetition` times."""
    return [max_repetition * source.tokens / run_tokens for source in sources]


def feasible(limits: Sequence[float]) -> bool:
    """Whether weights under `limits` can sum to 1 (a weight is at most 1 anyway)."""
    return sum(min(limit, 1.0) for limit in limits) >= 1.0


def check_room(sources: Sequence[Source], limits: Sequence[float], run_tokens: int, max_repetition: float) -> None:
    """Some mixture keeps every source under its cap: the caps leave room for a whole run."""
    if not feasible(limits):
        held = ", ".join(f"{source.name} {source.tokens}" for source in sources)
        raise StepFailed(
            f"no mixture fits: a run of {run_tokens} tokens would see the sources ({held} tokens) more than "
            f"{max_repetition:g} times whatever the weights; raise max_repetition or train fewer tokens"
        )


def repetition(weights: Sequence[float], sources: Sequence[Source], run_tokens: int) -> list[float]:
    """How many times a run of `run_tokens` on `weights` sees each source's tokens."""
    return [weight * run_tokens / source.tokens for weight, source in zip(weights, sources)]


def rounded(weights: Sequence[float]) -> list[float]:
    """Weights to DECIMALS places, summing to 1 (the largest takes the rounding's rest)."""
    shown = [round(weight, DECIMALS) for weight in weights]
    largest = max(range(len(shown)), key=lambda index: shown[index])
    shown[largest] = round(1.0 - sum(shown) + shown[largest], DECIMALS)
    return shown


def draw(
    prior: Sequence[float], limits: Sequence[float], concentration: float, seed: int, index: int
) -> tuple[list[float], int]:
    """Draw `index` of a swarm seeded `seed`: Dirichlet(concentration * k * prior), so that a
    concentration of 1 about a uniform prior is uniform over the simplex, and larger ones
    stay nearer the prior. Draws over a cap are rejected. Returns (weights, attempts)."""
    generator = random.Random(f"mixture-swarm/{seed}/{index}")
    shapes = [concentration * len(prior) * share for share in prior]
    for attempt in range(1, MAX_ATTEMPTS + 1):
        gammas = [generator.gammavariate(shape, 1.0) if shape > 0 else 0.0 for shape in shapes]
        total = sum(gammas)
        if total <= 0:
            continue
        weights = rounded([value / total for value in gammas])
        if all(0 <= weight <= limit for weight, limit in zip(weights, limits)):
            return weights, attempt
    raise StepFailed(
        f"no mixture drawn in {MAX_ATTEMPTS} tries keeps every source under its cap ({_shown(limits)}): "
        "raise max_repetition, train fewer tokens, or bring the prior nearer what the sources hold"
    )


def mixture_record(
    sources: Sequence[Source],
    weights: Sequence[float],
    prior: Sequence[float],
    run_tokens: int,
    max_repetition: float,
    **how: Any,
) -> dict[str, Any]:
    """mixture.json (rules/common/mixture_file.py) of `weights` over `sources`, with what a
    swarm's table and a fit read back: the prior, the sources' tokens, the run's, the caps,
    and `how` the weights were chosen."""
    names = [source.name for source in sources]
    return {
        "weights": {source.label: weight for source, weight in zip(sources, weights)},
        "names": {source.label: source.name for source in sources},
        "prior": dict(zip(names, prior)),
        "source_tokens": {source.name: source.tokens for source in sources},
        "run_tokens": run_tokens,
        "max_repetition": max_repetition,
        "repetition": dict(zip(names, (round(value, 4) for value in repetition(weights, sources, run_tokens)))),
        **how,
    }


def _shown(values: Sequence[float]) -> str:
    return ", ".join(f"{value:.3g}" for value in values)
