"""The cleaning rules of C4 (Raffel et al. 2020) as a filter."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, replace
from typing import ClassVar

from rules.webdata.blocks.documents import Document
from rules.webdata.blocks.filters.base import Filter, Verdict, split_lines

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
        lines = split_lines(CITATION.sub("", document.text) if self.remove_citations else document.text)
        kept = [line for line in lines if self._keeps(line)]
        if sum(len(SENTENCE_END.findall(line)) for line in kept) < self.min_sentences:
            return "too few sentences"
        text = "\n".join(kept)
        return document if text == document.text else replace(document, text=text)
