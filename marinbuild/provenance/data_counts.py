"""What a data step kept and passed over, read from its summary metrics: documents per split,
each filter's documents seen, kept and rejected (by reason), and inputs skipped by reason.

The data rules (`rules/`, which the engine never imports) write these fields into their
summary.json (docs/rules.md): `documents` ({split: count}), `filters` (a list, in chain
order, of {"name", "seen", "kept", "rejected", "reasons": {reason: count}} besides the
filter's parameters) and `skipped` ({reason: {"count", "first"}}). `marinbuild show`
prints them and the report tabulates them, so a researcher sees what each filter removed
without opening the file. Anything else in the summary is left to the plain metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FIELDS = ("documents", "filters", "skipped")  # the summary fields these counts are read from


@dataclass(frozen=True)
class FilterCount:
    """One filter of a chain: what reached it, what it kept and what it rejected, by reason."""

    name: str
    seen: int
    kept: int
    rejected: int
    reasons: tuple[tuple[str, int], ...]  # most frequent first

    @property
    def kept_share(self) -> float | None:
        return self.kept / self.seen if self.seen else None


@dataclass(frozen=True)
class SkipCount:
    """Inputs passed over for one reason (a line not JSON, a truncated record), and where first."""

    reason: str
    count: int
    first: str


@dataclass(frozen=True)
class DataCounts:
    documents: tuple[tuple[str, int], ...]  # (split, documents) in the summary's order
    filters: tuple[FilterCount, ...]
    skipped: tuple[SkipCount, ...]

    @property
    def total_documents(self) -> int:
        return sum(count for _, count in self.documents)

    @property
    def total_skipped(self) -> int:
        return sum(skip.count for skip in self.skipped)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _filter(item: Any) -> FilterCount | None:
    if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
        return None
    if not all(_count(item.get(name)) for name in ("seen", "kept", "rejected")):
        return None
    reasons = item.get("reasons", {})
    if not isinstance(reasons, Mapping) or not all(_count(count) for count in reasons.values()):
        return None
    ordered = tuple(sorted(((str(reason), count) for reason, count in reasons.items()), key=lambda x: (-x[1], x[0])))
    return FilterCount(item["name"], item["seen"], item["kept"], item["rejected"], ordered)


def _skip(reason: str, item: Any) -> SkipCount | None:
    if not isinstance(item, Mapping) or not _count(item.get("count")):
        return None
    return SkipCount(reason, item["count"], str(item.get("first", "")))


def data_counts(metrics: Mapping[str, Any]) -> DataCounts | None:
    """The counts of a data step's summary; None for any other step's metrics (or a summary
    whose fields are not of that shape: then they are plain metrics)."""
    documents = metrics.get("documents")
    if not isinstance(documents, Mapping) or not documents or not all(map(_count, documents.values())):
        return None
    filters_found = metrics.get("filters", [])
    skipped_found = metrics.get("skipped", {})
    if not isinstance(filters_found, list) or not isinstance(skipped_found, Mapping):
        return None
    filters = [_filter(item) for item in filters_found]
    skipped = [_skip(str(reason), item) for reason, item in skipped_found.items()]
    if any(item is None for item in filters) or any(item is None for item in skipped):
        return None
    return DataCounts(
        documents=tuple((str(split), count) for split, count in documents.items()),
        filters=tuple(item for item in filters if item is not None),
        skipped=tuple(sorted((item for item in skipped if item is not None), key=lambda s: (-s.count, s.reason))),
    )
