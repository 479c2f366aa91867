"""Arithmetic that gives the same bits on every machine: sums with math.fsum (correctly
rounded whatever their order), small linear systems solved by hand, never BLAS/LAPACK,
whose kernels and threads differ between CPUs; and every published number rounded to
`DIGITS` significant digits, far above the last bits a libm could differ in."""

from __future__ import annotations

import math
from collections.abc import Sequence

from marinbuild.targets.context import StepFailed

# Significant digits of every fitted number in fit.json.
DIGITS = 6
# Confidence intervals: the central 95% of the bootstrap.
CI_PERCENTILES = (2.5, 97.5)


def mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def solve(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """A small linear system by Gaussian elimination with partial pivoting."""
    n = len(rhs)
    rows = [list(map(float, row)) + [float(value)] for row, value in zip(matrix, rhs)]
    for column in range(n):
        pivot = max(range(column, n), key=lambda row: abs(rows[row][column]))
        if rows[pivot][column] == 0.0:
            raise StepFailed("a singular system: the runs of a budget do not span three token counts")
        rows[column], rows[pivot] = rows[pivot], rows[column]
        for row in range(column + 1, n):
            factor = rows[row][column] / rows[column][column]
            rows[row] = [a - factor * b for a, b in zip(rows[row], rows[column])]
    solution = [0.0] * n
    for row in reversed(range(n)):
        solution[row] = (rows[row][n] - math.fsum([rows[row][k] * solution[k] for k in range(row + 1, n)])) / rows[row][
            row
        ]
    return solution


def significant(value: float | None, digits: int = DIGITS) -> float | None:
    """`value` rounded to `digits` significant digits (None and non-finite values as they are)."""
    if value is None or not math.isfinite(value) or value == 0:
        return value
    return float(f"{value:.{digits - 1}e}")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile, interpolated linearly between order statistics (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def interval(values: Sequence[float]) -> list[float] | None:
    finite = [value for value in values if math.isfinite(value)]
    if not finite:
        return None
    return [significant(percentile(finite, CI_PERCENTILES[0])), significant(percentile(finite, CI_PERCENTILES[1]))]
