"""What deduplication does, checked when BUILD files load: exact dedup on or off, and the
parameters of near-duplicate (MinHash LSH) and paragraph dedup. `dedup` runs them; this
module imports no numpy, so that loading BUILD files does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from marinbuild.targets.attrs import AttrError, JsonValue
from rules.webdata.blocks.parameters import Parameters

_P = TypeVar("_P", bound=Parameters)
MAX_HASHES = 1024  # bands x rows: a signature of 4 KiB a document at most


@dataclass(frozen=True)
class FuzzyDedup(Parameters):
    """Near-duplicate detection by MinHash LSH (Broder 1997; Leskovec et al., "Mining of
    Massive Datasets", ch. 3).

    A document's shingles are its `ngram`-grams of lowercased word tokens (`\\w+`); its
    signature, `bands x rows` minimums of seeded hash functions over them. Two documents
    are candidates when all `rows` values of some band agree, which happens with
    probability 1 - (1 - s^rows)^bands for Jaccard similarity s, and near duplicates when
    their signatures agree on at least `threshold` of all values. The bands must make a
    pair at the threshold a candidate at least half the time, or the threshold would
    promise what the bands cannot find.
    """

    ngram: int = 5
    bands: int = 25
    rows: int = 4
    threshold: float = 0.6
    seed: int = 0

    @classmethod
    def subject(cls) -> str:
        return "fuzzy dedup"

    def candidate_probability(self, similarity: float) -> float:
        """The chance that two documents of this Jaccard similarity share a band."""
        return 1 - (1 - similarity**self.rows) ** self.bands

    def problems(self) -> list[str]:
        wrong = [f"'{name}' must be at least 1" for name in ("ngram", "bands", "rows") if getattr(self, name) < 1]
        if not 0 < self.threshold <= 1:
            wrong.append(f"'threshold' must be above 0 and at most 1, got {self.threshold}")
        if not 0 <= self.seed < 2**63:
            wrong.append(f"'seed' must be between 0 and 2**63 - 1, got {self.seed}")
        if wrong:
            return wrong
        if self.bands * self.rows > MAX_HASHES:
            return [f"bands x rows is {self.bands * self.rows} hash functions, more than {MAX_HASHES}"]
        chance = self.candidate_probability(self.threshold)
        if chance < 0.5:
            return [
                f"{self.bands} bands of {self.rows} rows make a pair of similarity {self.threshold} (the threshold) "
                f"a candidate with probability {chance:.2f}: use more bands, fewer rows or a higher threshold"
            ]
        return []


@dataclass(frozen=True)
class ParagraphDedup(Parameters):
    """Paragraph-level exact dedup (as CCNet, Wenzek et al. 2020, does by line): a paragraph
    of a kept document whose normalised text was seen before, by the stable order, is
    removed. Seen paragraphs are held in a Bloom filter sized for all the corpus's
    paragraphs, so a paragraph never seen is removed with probability
    `false_positive_rate`, and memory is 1.8 bytes a paragraph at 0.001."""

    false_positive_rate: float = 0.001

    @classmethod
    def subject(cls) -> str:
        return "paragraph dedup"

    def problems(self) -> list[str]:
        if not 0 < self.false_positive_rate < 1:
            return [f"'false_positive_rate' must be above 0 and below 1, got {self.false_positive_rate}"]
        return []


@dataclass(frozen=True)
class DedupConfig:
    """Which dedups run: exact (content hash), fuzzy (MinHash LSH) and paragraph, each off
    when None (exact when False)."""

    exact: bool = True
    fuzzy: FuzzyDedup | None = field(default_factory=FuzzyDedup)
    paragraphs: ParagraphDedup | None = None

    def __post_init__(self) -> None:
        if not (self.exact or self.fuzzy or self.paragraphs):
            raise AttrError("dedup: exact, fuzzy and paragraph dedup are all off, so it would remove nothing")

    @classmethod
    def from_spec(cls, exact: JsonValue = True, fuzzy: JsonValue = True, paragraphs: JsonValue = False) -> DedupConfig:
        """The config of BUILD values: `exact` a bool; `fuzzy` and `paragraphs` each a dict
        of parameters, True for the defaults, or False or None for off."""
        if not isinstance(exact, bool):
            raise AttrError(f"dedup: 'exact' must be a bool, got {exact!r}")
        return cls(exact, _part(FuzzyDedup, fuzzy), _part(ParagraphDedup, paragraphs))

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "exact": self.exact,
            "fuzzy": self.fuzzy.to_json() if self.fuzzy else None,
            "paragraphs": self.paragraphs.to_json() if self.paragraphs else None,
        }


def _part(cls: type[_P], spec: JsonValue) -> _P | None:
    if spec is None or spec is False:
        return None
    return cls() if spec is True else cls.from_spec(spec)
