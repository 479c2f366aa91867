"""Filters made from JSON-like specs (`make_filter`), and the chain that runs them in order
and counts what each saw, kept and rejected."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from marinbuild.errors import did_you_mean
from marinbuild.targets.attrs import AttrError, JsonValue
from rules.webdata.blocks.documents import Document
from rules.webdata.blocks.filters.base import Filter, ThresholdFilter, Verdict
from rules.webdata.blocks.filters.c4 import C4Quality
from rules.webdata.blocks.filters.gopher import GopherQuality, GopherRepetition
from rules.webdata.blocks.filters.scores import Language, QualityThreshold

FILTERS: dict[str, type[Filter]] = {
    cls.name: cls for cls in (GopherQuality, C4Quality, GopherRepetition, Language, QualityThreshold)
}


def make_filter(spec: Mapping[str, JsonValue]) -> Filter:
    """The filter a JSON-like spec names: `{"name": ..., PARAMETER: VALUE, ...}`."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
        raise AttrError(f"a filter is a dict with a 'name' (one of {', '.join(FILTERS)}), got {spec!r}")
    name = spec["name"]
    if name not in FILTERS:
        raise AttrError(
            f"unknown filter '{name}': the filters are {', '.join(FILTERS)}", hint=did_you_mean(name, FILTERS)
        )
    return FILTERS[name].from_spec({key: value for key, value in spec.items() if key != "name"})


@dataclass(frozen=True)
class Rejection:
    """A document a filter rejected, as it reached that filter, and why."""

    document: Document
    filter: str
    reason: str


@dataclass
class FilterCounts:
    """What one filter of a chain saw, kept and rejected (by reason)."""

    filter: Filter
    kept: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    # A ThresholdFilter's: each score it compared with its threshold, and how many it kept.
    scores: list[float] = field(default_factory=list)
    scores_kept: int = 0

    def apply(self, document: Document) -> Verdict:
        """The filter's verdict, counted: its score kept too, for a ThresholdFilter."""
        if not isinstance(self.filter, ThresholdFilter):
            verdict = self.filter.apply(document)
        else:
            verdict, score = self.filter.judge(document)
            if score is not None:
                self.scores.append(score)
                self.scores_kept += not isinstance(verdict, str)
        if isinstance(verdict, str):
            self.rejected[verdict] += 1
        else:
            self.kept += 1
        return verdict

    def to_json(self) -> dict[str, JsonValue]:
        return {
            **self.filter.to_json(),
            "seen": self.kept + sum(self.rejected.values()),
            "kept": self.kept,
            "rejected": sum(self.rejected.values()),
            "reasons": dict(sorted(self.rejected.items())),
        }


class FilterChain:
    """Filters applied in order: a document goes on while each keeps it, and stops at the
    first that rejects it. The counts are what `summary.json` holds: every document read
    was either kept by all or rejected by exactly one filter, so they add up."""

    def __init__(self, filters: Iterable[Filter]):
        self.counts = [FilterCounts(f) for f in filters]
        self.documents = 0
        self.kept = 0

    @classmethod
    def from_specs(cls, specs: Iterable[Mapping[str, JsonValue]]) -> FilterChain:
        return cls(make_filter(spec) for spec in specs)

    def run(self, documents: Iterable[Document]) -> Iterator[Document | Rejection]:
        """Each document kept by every filter (as the last one left it), or its Rejection."""
        for document in documents:
            self.documents += 1
            for counts in self.counts:
                verdict = counts.apply(document)
                if isinstance(verdict, str):
                    yield Rejection(document, counts.filter.name, verdict)
                    break
                document = verdict
            else:
                self.kept += 1
                yield document

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "documents": self.documents,
            "kept": self.kept,
            "rejected": self.documents - self.kept,
            "filters": [counts.to_json() for counts in self.counts],
        }
