"""What every document filter is: a frozen dataclass of parameters whose `apply` keeps a
document or says why not, and the words and lines the filters count."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from itertools import compress
from operator import not_
from typing import ClassVar

from marinbuild.targets.attrs import JsonValue
from rules.webdata.blocks.documents import Document
from rules.webdata.blocks.parameters import Parameters

Verdict = Document | str  # the document kept, or why it was rejected


class Filter(Parameters, ABC):
    """A document filter; subclasses are frozen dataclasses whose fields are its parameters."""

    name: ClassVar[str]

    @classmethod
    def subject(cls) -> str:
        return f"filter '{cls.name}'"

    @abstractmethod
    def apply(self, document: Document) -> Verdict:
        """The document kept (perhaps with its text rewritten), or the reason it is rejected."""

    def to_json(self) -> dict[str, JsonValue]:
        return {"name": self.name, **super().to_json()}


class ThresholdFilter(Filter, ABC):
    """A filter that keeps a document whose score reaches its `threshold` (a field of each
    subclass). `judge` gives the score it compared besides the verdict, so that the chain
    keeps the scores (`FilterCounts.scores`) and the step records their distribution: a
    threshold means little until one sees where it falls among them."""

    threshold: float

    @property
    @abstractmethod
    def score_name(self) -> str:
        """What the score is called: the metadata field it is kept in."""

    @abstractmethod
    def judge(self, document: Document) -> tuple[Verdict, float | None]:
        """The verdict, and the score compared with the threshold (None where none was)."""

    def apply(self, document: Document) -> Verdict:
        return self.judge(document)[0]


def split_words(text: str) -> list[str]:
    return text.split()


def split_lines(text: str) -> list[str]:
    return [line.strip() for line in text.split("\n") if line.strip()]


def count_alphabetic(words: Sequence[str], bare: Sequence[str]) -> int:
    """How many of `words` hold an alphabetic character: those whose `bare` form is all
    letters (most), found without a Python loop, and the others looked at one by one."""
    letters = list(map(str.isalpha, bare))
    others = compress(words, map(not_, letters))
    return sum(letters) + sum(1 for word in others if any(map(str.isalpha, word)))
