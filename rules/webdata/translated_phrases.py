"""`translated_phrases`'s step: a corpus of non-English text every machine has, humanize's
message catalogs (the only translations installed with the project), to train a
language-ID model on (`train_fasttext`) against English text."""

from __future__ import annotations

import re
from collections.abc import Iterator

from marinbuild.targets.context import Context, StepFailed
from rules.common.corpus import corpus_from
from rules.webdata.blocks.raw_corpus.pool import translations

_PLACEHOLDER = re.compile(r"%(?:\([^)]*\))?[-+ #0-9.]*[a-zA-Z]")  # printf-style slots: "%d", "%(n)s"


def _phrases(locales: list[str]) -> Iterator[tuple[str, list[str]]]:
    """(locale, phrases) of the catalogs asked for (all when none), placeholders taken out and
    phrases without a letter ("%d", ".") left out."""
    found = dict(translations())
    unknown = sorted(set(locales) - set(found))
    if unknown:
        raise StepFailed(f"humanize has no catalog for {', '.join(unknown)}: its locales are {', '.join(found)}")
    for locale in locales or list(found):
        phrases = [" ".join(_PLACEHOLDER.sub("", phrase).split()) for phrase in found[locale]]
        yield locale, [phrase for phrase in phrases if any(character.isalpha() for character in phrase)]


def translated_phrases(ctx: Context) -> None:
    per_document = ctx.attrs["phrases_per_document"]
    locales: list[str] = []

    def documents() -> Iterator[str]:
        for locale, phrases in _phrases(ctx.attrs["locales"]):
            locales.append(locale)
            for start in range(0, len(phrases), per_document):
                yield ". ".join(phrases[start : start + per_document]) + "."

    corpus_from(ctx, documents(), {"humanize_locales": locales, "phrases_per_document": per_document})
