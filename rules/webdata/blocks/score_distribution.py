"""Scores in [0, 1] of a sharded step's documents, counted so that shards add up exactly.

Each unit counts its scores into a histogram of BINS fixed, equal bins over [0, 1]
(`score_histogram`) and notes how many there are and the lowest and highest exactly
(`score_range`). The driver adds the units' histograms up, which gives the histogram of
every document whatever the sharding, and makes of the total the `Distribution` its
summary records (`distribution`): the min and max exact, the quantiles by the nearest-rank
method read off the merged histogram (the middle of the bin holding the value of rank
ceil(q x n), so within half a bin, 1/131072, of the exact one, and never outside the min
and max), and a histogram of at most DRAWN_BINS bins to draw, from the lowest value (or the
threshold) to the highest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from marinbuild.targets.attrs import JsonValue
from marinbuild.targets.distributions import Distribution

if TYPE_CHECKING:  # imported where used: BUILD files load the filters without numpy
    import numpy as np

BINS = 2**16  # of a score histogram: a power of two, so a bin's edge is exact in floating point
DRAWN_BINS = 64  # at most, in the histogram a summary keeps to draw
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def score_histogram(scores: Iterable[float]) -> np.ndarray:
    """How many scores fall in each of BINS equal bins over [0, 1] (1.0 in the last one):
    a shard's part of the sum, 512 KiB whatever its size."""
    import numpy as np

    values = np.fromiter(scores, dtype=np.float64)
    return np.bincount(_bin(values), minlength=BINS)


def score_range(scores: Sequence[float]) -> dict[str, JsonValue]:
    """What a unit notes of its scores besides their histogram: how many, the lowest and the highest."""
    return {"count": len(scores), "min": min(scores, default=None), "max": max(scores, default=None)}


def distribution(
    name: str,
    histograms: Iterable[np.ndarray],
    ranges: Iterable[Mapping[str, JsonValue]],
    threshold: float,
    kept: int,
) -> Distribution | None:
    """The distribution of every unit's scores (their `score_histogram` and `score_range`),
    with the threshold they were cut at and how many it kept; None where no unit had a score."""
    import numpy as np

    total = np.zeros(BINS, dtype=np.int64)
    for histogram in histograms:
        total += histogram
    scored = [found for found in ranges if found["count"]]
    count = int(total.sum())
    if not count:
        return None
    low, high = min(float(found["min"]) for found in scored), max(float(found["max"]) for found in scored)
    ranks = [max(1, math.ceil(round(q * count, 9))) for q in QUANTILES]  # 0.1 x 30 is 3.0000000000000004
    at = np.searchsorted(np.cumsum(total), ranks)
    quantiles = tuple((q, min(high, max(low, (int(index) + 0.5) / BINS))) for q, index in zip(QUANTILES, at))
    edges, counts = _drawn(total, min(low, threshold), max(high, threshold))
    return Distribution(name, count, low, high, quantiles, edges, counts, threshold, kept)


def _bin(values: np.ndarray) -> np.ndarray:
    import numpy as np

    return np.minimum(np.floor(values * BINS).astype(np.int64), BINS - 1)


def _drawn(total: np.ndarray, low: float, high: float) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """The bins of `total` from the one holding `low` to the one holding `high`, merged by
    the smallest power of two that leaves at most DRAWN_BINS of them: their edges and counts."""
    import numpy as np

    first, last = (int(index) for index in _bin(np.array([low, high])))
    width = 1
    while last // width - first // width + 1 > DRAWN_BINS:
        width *= 2
    start, stop = first // width * width, (last // width + 1) * width
    counts = total[start:stop].reshape(-1, width).sum(axis=1)
    edges = tuple((start + index * width) / BINS for index in range(len(counts) + 1))
    return edges, tuple(int(count) for count in counts)
