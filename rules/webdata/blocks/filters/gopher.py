"""The filters of Gopher (Rae et al. 2021): its quality rules and its repetition rules."""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from typing import ClassVar

from rules.webdata.blocks.documents import Document, paragraphs
from rules.webdata.blocks.filters.base import Filter, Verdict, count_alphabetic, split_lines, split_words
from rules.webdata.blocks.parameters import fraction

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
        words = split_words(document.text)
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
        lines = split_lines(text)
        if sum(line.startswith(BULLETS) for line in lines) / len(lines) > self.max_bullet_lines_ratio:
            return "too many bullet lines"
        if sum(line.endswith(ELLIPSES) for line in lines) / len(lines) > self.max_ellipsis_lines_ratio:
            return "too many ellipsis lines"
        if count_alphabetic(words, bare) / len(words) < self.min_alpha_words_ratio:
            return "too few alphabetic words"
        stop_words = set(self.stop_words)
        if sum(map(stop_words.__contains__, map(str.lower, bare))) < self.min_stop_words:
            return "too few stop words"
        return document


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
            (split_lines(text), "line", self.max_duplicate_lines, self.max_duplicate_line_characters),
        ):
            count, characters = _duplicates(elements)
            if elements and count / len(elements) > max_count:
                return f"duplicate {kind}s"
            if elements and characters / sum(len(element) for element in elements) > max_characters:
                return f"duplicate {kind} characters"
        words = split_words(text)
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
