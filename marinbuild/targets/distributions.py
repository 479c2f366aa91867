"""Distributions of the values a step cuts on, which it records and the engine shows.

A step that keeps what reaches a threshold (score_quality's cut, a filter's) records in its
summary metrics (the rule's `metrics_file`), under `distributions`, one `Distribution` per
value it cut on: how many values, the lowest and the highest, quantiles, a histogram to
draw, and the threshold with how many values it kept. A cut is a number that means little
without them: the scores of a corpus may all lie above or below it. `marinbuild show` prints
each in two lines and the report's step page draws each, with the threshold as a line,
from this JSON alone: any rule can record one (`Distribution.to_json`), and the engine knows
nothing of the rule that did.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from marinbuild.targets.attrs import JsonValue

FIELD = "distributions"  # the summary's field: a list of Distribution.to_json()
_LEVELS = " ▁▂▃▄▅▆▇█"  # a bin's height in a line of text: none, then eighths of the tallest


@dataclass(frozen=True)
class Distribution:
    """The values one cut looked at. `quantiles` are (fraction, value) pairs, ascending;
    `edges` and `counts` a histogram to draw (len(edges) == len(counts) + 1, ascending);
    `kept` how many values `threshold` kept (None where there is no threshold)."""

    name: str
    count: int
    minimum: float
    maximum: float
    quantiles: tuple[tuple[float, float], ...]
    edges: tuple[float, ...]
    counts: tuple[int, ...]
    threshold: float | None = None
    kept: int | None = None

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "name": self.name,
            "count": self.count,
            "min": self.minimum,
            "max": self.maximum,
            "quantiles": [[fraction, value] for fraction, value in self.quantiles],
            "histogram": {"edges": list(self.edges), "counts": list(self.counts)},
            "threshold": self.threshold,
            "kept": self.kept,
        }

    @classmethod
    def from_json(cls, value: Any) -> Distribution | None:
        """The distribution `to_json` gave; None for anything not of its shape (then the
        summary's field is left to the plain metrics)."""
        try:
            histogram = value["histogram"]
            found = cls(
                name=str(value["name"]),
                count=_count(value["count"]),
                minimum=_number(value["min"]),
                maximum=_number(value["max"]),
                quantiles=tuple((_number(fraction), _number(at)) for fraction, at in value["quantiles"]),
                edges=tuple(_number(edge) for edge in histogram["edges"]),
                counts=tuple(_count(count) for count in histogram["counts"]),
                threshold=None if value.get("threshold") is None else _number(value["threshold"]),
                kept=None if value.get("kept") is None else _count(value["kept"]),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return found if len(found.edges) == len(found.counts) + 1 else None

    @property
    def kept_share(self) -> float | None:
        return None if self.kept is None or not self.count else self.kept / self.count

    def summary(self) -> str:
        """`4 values: min 0.12, p10 0.12, median 0.5, p90 0.93, max 0.93`, each to as many
        decimals as tell the values apart."""
        decimals = self.decimals
        points = [("min", self.minimum), *((_quantile_name(q), value) for q, value in self.quantiles)]
        points.append(("max", self.maximum))
        return f"{self.count:,} values: " + ", ".join(f"{name} {value:.{decimals}f}" for name, value in points)

    def cut(self) -> str | None:
        """`threshold 0.9 keeps none of 4`, `keeps 2 of 4 (50.0%)`, `keeps all 4`; None without one."""
        if self.threshold is None or self.kept is None:
            return None
        if self.kept == 0:
            kept = f"none of {self.count:,}"
        elif self.kept == self.count:
            kept = f"all {self.count:,}"
        else:
            kept = f"{self.kept:,} of {self.count:,} ({self.kept / self.count:.1%})"
        return f"threshold {self.threshold:g} keeps {kept}"

    def warning(self) -> str | None:
        """For `ctx.warn`: a threshold that keeps none or all of the values does not cut."""
        if self.threshold is None or self.kept not in (0, self.count):
            return None
        low, high = f"{self.minimum:.{self.decimals}f}", f"{self.maximum:.{self.decimals}f}"
        what = "none" if self.kept == 0 else "all"
        return (
            f"the threshold {self.threshold:g} on {self.name} keeps {what} of {self.count:,} (they lie in {low}–{high})"
        )

    def bars(self) -> str:
        """The histogram in one line of text, between its edges, with `|` where the threshold falls."""
        tallest = max(self.counts, default=0) or 1
        bars = "".join(_LEVELS[math.ceil(8 * count / tallest)] for count in self.counts)
        if self.threshold is not None:
            at = min(bisect.bisect_left(self.edges, self.threshold), len(bars))
            bars = bars[:at] + "|" + bars[at:]
        decimals = self.decimals
        return f"{self.edges[0]:.{decimals}f} {bars} {self.edges[-1]:.{decimals}f}"

    @property
    def decimals(self) -> int:
        """Decimals enough that the values' range spans ten steps of the last or more (2 to 6)."""
        spread = self.maximum - self.minimum
        return 2 if spread <= 0 else min(6, max(2, 1 - math.floor(math.log10(spread))))


def distributions(metrics: Mapping[str, Any]) -> tuple[Distribution, ...] | None:
    """The distributions a summary records; None where it has none, or where its field is
    not a list of them."""
    found = metrics.get(FIELD)
    if not isinstance(found, list) or not found:
        return None
    parsed = [Distribution.from_json(item) for item in found]
    return None if any(item is None for item in parsed) else tuple(item for item in parsed if item is not None)


def _quantile_name(fraction: float) -> str:
    return "median" if fraction == 0.5 else f"p{100 * fraction:g}"


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(value)
    return float(value)


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(value)
    return value
