"""A fastText quality classifier: trained on two sets of documents, scoring each document.

As DCLM (Li et al. 2024, "DataComp-LM", section 4.4: a fastText bigram classifier, instruction
data and ELI5 answers against RefinedWeb) and Marin do, the classifier is fastText's
supervised linear model over word n-grams, trained on documents labelled `__label__hq`
(the positive set, what good data looks like) and `__label__lq` (the negative set), each
normalised to one line (`one_line`). A document's score is the model's probability of
`__label__hq`, kept in its metadata (`quality_score`), so that a threshold
(`filters.scores.QualityThreshold`) or a top fraction of the corpus (the cut `top_fraction_cut`
computes from every shard's `score_distribution.score_histogram`) keeps the best.

Training is deterministic, as blocks/fasttext.py explains: one thread, the given seed,
the two sets interleaved in proportion, and an input matrix of at least 2^23 floats (with
word n-grams), so the same documents and hyper-parameters give the same model file.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from marinbuild.targets.attrs import AttrError
from marinbuild.targets.context import StepFailed
from rules.webdata.blocks.documents import Document
from rules.webdata.blocks.fasttext import (
    LABEL_PREFIX,
    MIN_INPUT_FLOATS,
    fasttext_model,
    interleave,
    one_line,
    train_supervised,
)
from rules.webdata.blocks.filters.scores import QUALITY_SCORE
from rules.webdata.blocks.parameters import Parameters
from rules.webdata.blocks.score_distribution import BINS

if TYPE_CHECKING:  # imported where used: BUILD files check the hyper-parameters without numpy
    import numpy as np

POSITIVE, NEGATIVE = "hq", "lq"


@dataclass(frozen=True)
class QualityHyperparameters(Parameters):
    """fastText's supervised training settings (its names, in snake case): fastText's
    defaults but `word_ngrams`, 2 (DCLM's bigrams), and `seed`, 1 (what fastText's 0 means).
    `bucket` is the number of hashed n-gram rows: the model holds `bucket x dim` floats
    (800 MB at the defaults), at least MIN_INPUT_FLOATS for one thread's training to be
    deterministic (the module's docstring says why)."""

    epoch: int = 5
    lr: float = 0.1
    word_ngrams: int = 2
    dim: int = 100
    min_count: int = 1
    bucket: int = 2_000_000
    seed: int = 1

    @classmethod
    def subject(cls) -> str:
        return "quality classifier"

    def problems(self) -> list[str]:
        wrong = [
            f"'{name}' must be at least 1"
            for name in ("epoch", "word_ngrams", "dim", "min_count", "bucket")
            if getattr(self, name) < 1
        ]
        if not 0 < self.lr <= 10:
            wrong.append(f"'lr' must be above 0 and at most 10, got {self.lr}")
        if not wrong and (self.word_ngrams < 2 or self.bucket * self.dim < MIN_INPUT_FLOATS):
            wrong.append(
                f"need word_ngrams >= 2 and bucket x dim >= {MIN_INPUT_FLOATS:,} (a 32 MiB input matrix), got "
                f"{self.word_ngrams} and {self.bucket} x {self.dim}: fastText on one thread initialises a tenth "
                "of a smaller matrix and leaves the rest to chance"
            )
        if not 1 <= self.seed < 2**31:  # fastText's std::minstd_rand takes a seed of 0 as 1: one model, two keys
            wrong.append(f"'seed' must be between 1 and 2**31 - 1 (fastText's 0 is its 1), got {self.seed}")
        return wrong


@dataclass(frozen=True)
class TrainedClassifier:
    """What training saw and how well the model fits it (precision at 1 on its own training set)."""

    positive: int
    negative: int
    training_precision: float

    def to_json(self) -> dict[str, float]:
        return {"positive": self.positive, "negative": self.negative, "training_precision": self.training_precision}


def _write_class(documents: Iterable[Document], label: str, path: Path) -> int:
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for document in documents:
            if text := one_line(document.text):
                out.write(f"{LABEL_PREFIX}{label} {text}\n")
                count += 1
    return count


def train_classifier(
    positive: Iterable[Document],
    negative: Iterable[Document],
    hyperparameters: QualityHyperparameters,
    model: Path,
    work: Path,
) -> TrainedClassifier:
    """Train on `positive` and `negative` documents and save the model at `model`; `work` is
    a directory for the training files. Empty documents are left out; a set with none left
    fails the step."""
    work.mkdir(parents=True, exist_ok=True)
    counts = (
        _write_class(positive, POSITIVE, work / "positive.txt"),
        _write_class(negative, NEGATIVE, work / "negative.txt"),
    )
    for count, name in zip(counts, ("positive", "negative")):
        if not count:
            raise StepFailed(f"the {name} set of the quality classifier has no document with text")
    interleave(
        {POSITIVE: work / "positive.txt", NEGATIVE: work / "negative.txt"},
        {POSITIVE: counts[0], NEGATIVE: counts[1]},
        work / "train.txt",
    )
    settings = {
        "epoch": hyperparameters.epoch,
        "lr": hyperparameters.lr,
        "dim": hyperparameters.dim,
        "word_ngrams": hyperparameters.word_ngrams,
        "minn": 0,
        "maxn": 0,
        "min_count": hyperparameters.min_count,
        "bucket": hyperparameters.bucket,
        "loss": "softmax",
        "seed": hyperparameters.seed,
    }
    trained = train_supervised(work / "train.txt", settings, model)
    _, precision, _ = trained.test(str(work / "train.txt"))
    return TrainedClassifier(counts[0], counts[1], float(precision))


class QualityScorer:
    """Scores documents with a trained classifier: the probability of `__label__hq`."""

    def __init__(self, model: Path | str, field: str = QUALITY_SCORE):
        self.model = str(model)
        self.field = field

    def score(self, text: str) -> float:
        labels, probabilities = fasttext_model(self.model, "quality").predict(one_line(text), k=2)
        found = dict(zip(labels, probabilities)).get(f"{LABEL_PREFIX}{POSITIVE}", 0.0)
        return min(1.0, max(0.0, float(found)))  # fastText's softmax can overshoot 1 by 1e-5

    def annotate(self, document: Document) -> Document:
        """The document with its score in its metadata."""
        return replace(document, metadata={**document.metadata, self.field: self.score(document.text)})


def top_fraction_cut(histograms: Iterable[np.ndarray], fraction: float) -> float:
    """The highest bin edge such that at least `fraction` of all documents score at or above
    it: `QualityThreshold(threshold=cut)` then keeps the top `fraction`, and a few more, the
    documents of the cut's bin tied with the last one needed (scores within 1/BINS)."""
    import numpy as np

    if not 0 < fraction <= 1:
        raise AttrError(f"the top fraction of documents to keep must be above 0 and at most 1, got {fraction}")
    total = np.zeros(BINS, dtype=np.int64)
    for histogram in histograms:
        total += histogram
    needed = math.ceil(round(fraction * int(total.sum()), 9))  # 0.3 x 10 is 3.0000000000000004
    if needed == 0:
        return 0.0
    from_top = np.cumsum(total[::-1])
    highest = BINS - 1 - int(np.searchsorted(from_top, needed))
    return highest / BINS
