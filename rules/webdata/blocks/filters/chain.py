"""Document filters, and the chain that runs them and counts what each removed.

Each filter is a small frozen dataclass of `parameters.Parameters`: its fields are its
parameters, checked when it is made (a wrong name, type or range is an `AttrError` naming
the valid ones, which the loader turns into an error at the BUILD line), and `apply`
returns the document kept (rewritten, for the C4 rules, which drop lines) or the reason it
is rejected, a short fixed phrase so that counts by reason stay readable. Filters are made
from JSON-like specs, `{"name": "gopher_quality", "min_words": 100}`, by `make_filter`;
`Filter.to_json` gives back every parameter, defaults included, which is what a step's key
holds.

Defaults follow the papers that published the rules, cited in each filter's docstring.
Words are the whitespace-separated tokens of the text (the papers do not fix a
tokenizer); a line is what lies between newlines, a paragraph what lies between blank
lines. The language filter imports fastText only when it first runs, so loading BUILD
files never imports it.
"""

from __future__ import annotations

import functools
import re
import string
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress, repeat
from operator import not_
from typing import Any, ClassVar

from marinbuild.errors import did_you_mean
from marinbuild.targets.attrs import AttrError, JsonValue
from marinbuild.targets.context import StepFailed
from rules.webdata.documents import Document, paragraphs
from rules.webdata.parameters import Parameters, fraction

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


def _words(text: str) -> list[str]:
    return text.split()


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.split("\n") if line.strip()]


def _alphabetic(words: Sequence[str], bare: Sequence[str]) -> int:
    """How many of `words` hold an alphabetic character: those whose `bare` form is all
    letters (most), found without a Python loop, and the others looked at one by one."""
    letters = list(map(str.isalpha, bare))
    others = compress(words, map(not_, letters))
    return sum(letters) + sum(1 for word in others if any(map(str.isalpha, word)))


# -- Gopher quality ---------------------------------------------------------------------------

BULLETS = ("•", "●", "◦", "‣", "⁃", "-", "*", "·")
ELLIPSES = ("...", "…")


@dataclass(frozen=True)
class GopherQuality(Filter):
    """The quality rules of MassiveWeb (Rae et al. 2021, "Scaling Language Models: Methods,
    Analysis & Insights from Training Gopher", appendix A.1.1), with its thresholds: between
    50 and 100,000 words; a mean word length of 3 to 10 characters (punctuation around a
    word not counted); at most 0.1 hash symbols and 0.1 ellipses per word; at most 90% of
    lines starting with a bullet and 30% ending in an ellipsis; at least 80% of words holding
    an alphabetic character; and at least two occurrences of the stop words "the, be, to,
    of, and, that, have, with".
    """

    name: ClassVar[str] = "gopher_quality"
    min_words: int = 50
    max_words: int = 100_000
    min_mean_word_length: float = 3.0
    max_mean_word_length: float = 10.0
    max_symbol_word_ratio: float = 0.1
    max_bullet_lines_ratio: float = 0.9
    max_ellipsis_lines_ratio: float = 0.3
    min_alpha_words_ratio: float = 0.8
    stop_words: tuple[str, ...] = ("the", "be", "to", "of", "and", "that", "have", "with")
    min_stop_words: int = 2

    def problems(self) -> list[str]:
        wrong = []
        if not 0 <= self.min_words <= self.max_words:
            wrong.append(f"need 0 <= min_words <= max_words, got {self.min_words} and {self.max_words}")
        if not 0 <= self.min_mean_word_length <= self.max_mean_word_length:
            wrong.append("need 0 <= min_mean_word_length <= max_mean_word_length")
        for name in ("max_bullet_lines_ratio", "max_ellipsis_lines_ratio", "min_alpha_words_ratio"):
            wrong += fraction(name, getattr(self, name))
        if self.max_symbol_word_ratio < 0 or self.min_stop_words < 0:
            wrong.append("max_symbol_word_ratio and min_stop_words must not be negative")
        return wrong

    def apply(self, document: Document) -> Verdict:
        words = _words(document.text)
        if len(words) < self.min_words:
            return "too few words"
        if len(words) > self.max_words:
            return "too many words"
        bare = list(map(str.strip, words, repeat(string.punctuation)))  # each word, punctuation around it off
        mean_length = sum(map(len, bare)) / len(words)
        if not self.min_mean_word_length <= mean_length <= self.max_mean_word_length:
            return "mean word length out of range"
        text = document.text
        hashes, ellipses = text.count("#"), sum(text.count(mark) for mark in ELLIPSES)
        if max(hashes, ellipses) / len(words) > self.max_symbol_word_ratio:
            return "too many symbols"
        lines = _lines(text)
        if sum(line.startswith(BULLETS) for line in lines) / len(lines) > self.max_bullet_lines_ratio:
            return "too many bullet lines"
        if sum(line.endswith(ELLIPSES) for line in lines) / len(lines) > self.max_ellipsis_lines_ratio:
            return "too many ellipsis lines"
        if _alphabetic(words, bare) / len(words) < self.min_alpha_words_ratio:
            return "too few alphabetic words"
        stop_words = set(self.stop_words)
        if sum(map(stop_words.__contains__, map(str.lower, bare))) < self.min_stop_words:
            return "too few stop words"
        return document


# -- C4 -----------------------------------------------------------------------------------------

POLICY_PHRASES = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]", re.IGNORECASE)
SENTENCE_END = re.compile(r"[.!?]+(?=[\"'”’)\]]*(?:\s|$))")


@dataclass(frozen=True)
class C4Quality(Filter):
    """The cleaning rules of C4 (Raffel et al. 2020, "Exploring the Limits of Transfer
    Learning with a Unified Text-to-Text Transformer", JMLR 21, section 2.2). Lines are
    kept only if they end in terminal punctuation (a period, exclamation mark, question mark
    or end quotation mark), hold at least 5 words and no word over 1,000 characters (the
    limit of the TensorFlow Datasets implementation, `c4_utils`), do not mention
    "javascript" and hold none of the policy phrases ("terms of use", "privacy policy",
    "cookie policy", "uses cookies", "use of cookies", "use cookies"); citation markers
    ("[1]", "[edit]", "[citation needed]") are removed. A page is rejected if it holds "lorem
    ipsum" or a curly bracket, a word of `bad_words`, or fewer than 3 sentences once its
    lines are cleaned (sentences are counted by their end punctuation, where C4 used a
    sentence tokenizer). C4's bad words were the English "List of Dirty, Naughty, Obscene
    or Otherwise Bad Words"; no such list ships with marinbuild, so `bad_words` is empty
    unless given. The document kept has the kept lines as its text.
    """

    name: ClassVar[str] = "c4_quality"
    min_words_per_line: int = 5
    max_word_length: int = 1000
    min_sentences: int = 3
    terminal_punctuation: tuple[str, ...] = (".", "!", "?", '"', "”")
    remove_citations: bool = True
    drop_javascript_lines: bool = True
    drop_policy_lines: bool = True
    reject_lorem_ipsum: bool = True
    reject_curly_bracket: bool = True
    bad_words: tuple[str, ...] = ()

    def problems(self) -> list[str]:
        if min(self.min_words_per_line, self.max_word_length, self.min_sentences) < 0:
            return ["min_words_per_line, max_word_length and min_sentences must not be negative"]
        return [] if self.terminal_punctuation else ["terminal_punctuation must not be empty"]

    def _keeps(self, line: str) -> bool:
        words = line.split()
        lowered = line.lower()
        return (
            line.endswith(self.terminal_punctuation)
            and len(words) >= self.min_words_per_line
            and max(map(len, words), default=0) <= self.max_word_length
            and not (self.drop_javascript_lines and "javascript" in lowered)
            and not (self.drop_policy_lines and any(phrase in lowered for phrase in POLICY_PHRASES))
        )

    def apply(self, document: Document) -> Verdict:
        lowered = document.text.lower()
        if self.reject_lorem_ipsum and "lorem ipsum" in lowered:
            return "lorem ipsum"
        if self.reject_curly_bracket and "{" in document.text:
            return "curly bracket"
        if self.bad_words:
            bad = {word.lower() for word in self.bad_words}
            if any(word.strip(string.punctuation) in bad for word in lowered.split()):
                return "bad word"
        lines = _lines(CITATION.sub("", document.text) if self.remove_citations else document.text)
        kept = [line for line in lines if self._keeps(line)]
        if sum(len(SENTENCE_END.findall(line)) for line in kept) < self.min_sentences:
            return "too few sentences"
        text = "\n".join(kept)
        return document if text == document.text else replace(document, text=text)


# -- Gopher repetition --------------------------------------------------------------------------


def _duplicates(elements: Sequence[str]) -> tuple[int, int]:
    """How many of `elements` repeat an earlier one, and the characters of those repeats."""
    seen: set[str] = set()
    count = characters = 0
    for element in elements:
        if element in seen:
            count += 1
            characters += len(element)
        else:
            seen.add(element)
    return count, characters


def _ngrams(words: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """The n-grams of `words`, in order (zip builds them without a Python loop)."""
    return list(zip(*(words[k:] for k in range(n))))


def _top_ngram_fraction(words: Sequence[str], total: int, n: int) -> float:
    """The share of the words' characters (`total`) in the most frequent n-gram's
    occurrences; of n-grams as frequent, the first."""
    ngrams = Counter(_ngrams(words, n))
    if not ngrams:
        return 0.0
    top, count = ngrams.most_common(1)[0]
    return count * sum(map(len, top)) / total


def _duplicate_ngram_fraction(words: Sequence[str], lengths: Sequence[int], total: int, n: int) -> float:
    """The share of the words' characters (`lengths` of each, `total` of all) inside
    n-grams that occur more than once, each character counted once however many such
    n-grams overlap it."""
    ngrams = _ngrams(words, n)
    counts = Counter(ngrams)
    if len(counts) == len(ngrams):  # no n-gram repeats
        return 0.0
    covered = bytearray(len(words))
    span = b"\x01" * n
    for start, count in enumerate(map(counts.__getitem__, ngrams)):
        if count > 1:
            covered[start : start + n] = span
    return sum(compress(lengths, covered)) / total


@dataclass(frozen=True)
class GopherRepetition(Filter):
    """The repetition rules of MassiveWeb (Rae et al. 2021, appendix A.1.1, table A1), with
    its thresholds: at most 30% of paragraphs and of lines repeating an earlier one, and 20%
    of the characters in such paragraphs and lines; the most frequent 2-, 3- and 4-gram
    covering at most 20%, 18% and 16% of the words' characters; the duplicated 5- to
    10-grams at most 15%, 14%, 13%, 12%, 11% and 10%. Checked in that order, the first
    broken rule giving the reason.
    """

    name: ClassVar[str] = "gopher_repetition"
    max_duplicate_lines: float = 0.30
    max_duplicate_paragraphs: float = 0.30
    max_duplicate_line_characters: float = 0.20
    max_duplicate_paragraph_characters: float = 0.20
    top_ngrams: tuple[tuple[int, float], ...] = ((2, 0.20), (3, 0.18), (4, 0.16))
    duplicate_ngrams: tuple[tuple[int, float], ...] = (
        (5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10),
    )  # fmt: skip

    def problems(self) -> list[str]:
        wrong = []
        for name in (
            "max_duplicate_lines",
            "max_duplicate_paragraphs",
            "max_duplicate_line_characters",
            "max_duplicate_paragraph_characters",
        ):
            wrong += fraction(name, getattr(self, name))
        for name in ("top_ngrams", "duplicate_ngrams"):
            for n, share in getattr(self, name):
                if n < 1 or not 0 <= share <= 1:
                    wrong.append(f"'{name}' holds [n, share] pairs with n >= 1 and 0 <= share <= 1, got [{n}, {share}]")
        return wrong

    def apply(self, document: Document) -> Verdict:
        text = document.text
        for elements, kind, max_count, max_characters in (
            (paragraphs(text), "paragraph", self.max_duplicate_paragraphs, self.max_duplicate_paragraph_characters),
            (_lines(text), "line", self.max_duplicate_lines, self.max_duplicate_line_characters),
        ):
            count, characters = _duplicates(elements)
            if elements and count / len(elements) > max_count:
                return f"duplicate {kind}s"
            if elements and characters / sum(len(element) for element in elements) > max_characters:
                return f"duplicate {kind} characters"
        words = _words(text)
        lengths = list(map(len, words))
        total = sum(lengths)  # words are never empty: no words, no n-grams, and 0.0 for each
        for n, share in self.top_ngrams:
            if _top_ngram_fraction(words, total, n) > share:
                return f"top {n}-gram"
        measured: list[tuple[int, float]] = []
        for n, share in self.duplicate_ngrams:
            # A repeated n-gram's words lie in repeated m-grams for every m <= n, so its
            # share is at most theirs: below this threshold too, it need not be counted.
            if any(m <= n and found <= share for m, found in measured):
                continue
            found = _duplicate_ngram_fraction(words, lengths, total, n)
            if found > share:
                return f"duplicate {n}-grams"
            measured.append((n, found))
        return document


# -- language -----------------------------------------------------------------------------------

LABEL_PREFIX = "__label__"


@functools.cache
def fasttext_model(path: str, role: str) -> Any:
    """The fastText model at `path` (a `role` model: language, quality), loaded once per process."""
    import fasttext

    try:
        return fasttext.load_model(path)
    except ValueError as error:
        raise StepFailed(f"cannot load the fastText {role} model {path}: {error}") from None


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


# -- quality ------------------------------------------------------------------------------------

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


# -- making filters, and the chain --------------------------------------------------------------

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
