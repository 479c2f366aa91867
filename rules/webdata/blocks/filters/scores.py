"""The filters with a threshold on a score: the language a fastText model finds, and the
quality score a classifier wrote (`quality.QualityScorer`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import ClassVar

from marinbuild.targets.attrs import JsonValue
from rules.webdata.blocks.documents import Document
from rules.webdata.blocks.fasttext import LABEL_PREFIX, fasttext_model
from rules.webdata.blocks.filters.base import ThresholdFilter, Verdict
from rules.webdata.blocks.parameters import fraction


@dataclass(frozen=True)
class Language(ThresholdFilter):
    """Keeps documents a fastText language-ID model puts in one of `languages` with a score
    of at least `threshold`, and records the language and its score in the metadata
    (`language`, `language_score`).

    `model` is the path of the model file (labels `__label__en`, ...), a pinned input of the
    step, never downloaded. The threshold 0.65 is the one the FineWeb pipeline (Penedo et
    al. 2024) keeps English at with fastText's lid.176 model; CCNet (Wenzek et al. 2020)
    used 0.5.
    """

    name: ClassVar[str] = "language"
    model: str = ""
    languages: tuple[str, ...] = ("en",)
    threshold: float = 0.65

    def problems(self) -> list[str]:
        wrong = [] if self.model else ["'model' (the fastText model file) is required"]
        if not self.languages or not all(re.fullmatch(r"[A-Za-z_-]+", code) for code in self.languages):
            wrong.append(f"'languages' must be language codes such as 'en', got {list(self.languages)}")
        return wrong + fraction("threshold", self.threshold)

    @property
    def score_name(self) -> str:
        return "language_score"

    def judge(self, document: Document) -> tuple[Verdict, float | None]:
        labels, scores = fasttext_model(self.model, "language").predict(document.text.replace("\n", " "), k=1)
        language, score = labels[0].removeprefix(LABEL_PREFIX), float(scores[0])
        if language not in self.languages:
            return "other language", None
        if score < self.threshold:
            return "language score below threshold", score
        return replace(document, metadata={**document.metadata, "language": language, self.score_name: score}), score


def with_model(spec: Mapping[str, JsonValue], model: str) -> Mapping[str, JsonValue]:
    """A filter's spec, the language filter's with `model` as its model."""
    is_language = isinstance(spec, Mapping) and spec.get("name") == Language.name
    return {**spec, "model": model} if is_language else spec


QUALITY_SCORE = "quality_score"  # the metadata field quality.QualityScorer writes


@dataclass(frozen=True)
class QualityThreshold(ThresholdFilter):
    """Keeps documents whose quality score (the metadata `field`, written by the quality
    classifier, `quality.QualityScorer`) is at least `threshold`. A top-quantile filter is
    this filter at the cut `quality.top_fraction_cut` computes over every shard's scores.
    """

    name: ClassVar[str] = "quality_threshold"
    threshold: float = 0.5
    field: str = QUALITY_SCORE

    def problems(self) -> list[str]:
        return fraction("threshold", self.threshold) + ([] if self.field else ["'field' must not be empty"])

    @property
    def score_name(self) -> str:
        return self.field

    def judge(self, document: Document) -> tuple[Verdict, float | None]:
        score = document.metadata.get(self.field)
        if not isinstance(score, int | float) or isinstance(score, bool):
            return "no quality score", None
        return document if score >= self.threshold else "quality below threshold", float(score)
