"""Raw data every machine with marinbuild has, as steps: so the web-data examples and tests
need no network.

- `synthetic_web_pages`: WARC files of generated web pages (`raw_corpus`), with its ground
  truth (which page copies which, which is boilerplate, low quality or not English), the
  raw input of `extract_text`.
- `translated_phrases`: a corpus of non-English text, humanize's message catalogs (the
  only translations installed with the project), to train a language-ID model on
  (`train_fasttext`) against English text.

Both read files outside the workspace (the standard library, humanize's catalogs): they
are the steps' external inputs, so a key follows their content; `synthetic_web_pages` also
has the interpreter's version in its key (`python_version`, set by marinbuild), which its
WARC files record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from marinbuild.targets import Attr, Execution, Resources, Rule
from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import JsonValue
from marinbuild.targets.context import Context, StepFailed
from rules.corpus_shards import CORPUS_ATTRS, SUMMARY, check_corpus_attrs, write_corpus
from rules.data import PYTHON_VERSION, check_python_version, check_running_python

# -- synthetic_web_pages -------------------------------------------------------------------

# The attributes that make a `raw_corpus.RawCorpusSpec`, by its field names.
_SPEC_ATTRS: dict[str, Attr] = {
    "pages": Attr(types.INT, default=1000, doc="How many pages (WARC response records)."),
    "seed": Attr(types.INT, default=0, doc="Every page is a function of (seed, its index)."),
    "pages_per_file": Attr(types.INT, default=1000, doc="Pages per WARC file (warc/part-00000.warc.gz, ...)."),
    "exact_duplicate_rate": Attr(types.FLOAT, default=0.05, doc="Share of pages that copy an earlier one's HTML."),
    "near_duplicate_rate": Attr(types.FLOAT, default=0.05, doc="Share of pages that copy an earlier one, edited."),
    "near_duplicate_edits": Attr(types.FLOAT, default=0.02, doc="Share of words a near duplicate changes."),
    "boilerplate_rate": Attr(types.FLOAT, default=0.02, doc="Share of pages of a site's chrome and no main text."),
    "low_quality_rate": Attr(types.FLOAT, default=0.05, doc="Share of link lists, repeated lines, lorem ipsum..."),
    "non_english_rate": Attr(types.FLOAT, default=0.02, doc="Share of pages of humanize's translated phrases."),
    "malformed_rate": Attr(types.FLOAT, default=0.01, doc="Share of records a reader must skip (bad UTF-8...)."),
    "truncate_last_record": Attr(types.BOOL, default=True, doc="End the last file in a record cut in half."),
    "stdlib_modules": Attr(
        types.INT, default=None, doc="How many stdlib modules feed the text pool (None: all; 0: the docs alone)."
    ),
}


def _spec(attrs: Mapping[str, JsonValue]) -> Any:
    """The generator's spec; raw_corpus (which imports warcio) is imported here, when a BUILD
    file declares such a target or its step runs."""
    from rules.webdata.raw_corpus import RawCorpusSpec

    return RawCorpusSpec(**{name: attrs[name] for name in _SPEC_ATTRS})


def _check_web_pages(attrs: Mapping[str, JsonValue]) -> None:
    check_python_version(attrs)
    _spec(attrs)  # its ValueError (a rate out of range...) names the BUILD line


def _pool_inputs(attrs: Mapping[str, JsonValue]) -> Mapping[str, Path]:
    from rules.webdata.raw_corpus import pool_sources

    return pool_sources(attrs["stdlib_modules"])


def _synthetic_web_pages(ctx: Context) -> None:
    from rules.webdata.raw_corpus import write_raw_corpus

    check_running_python(ctx)
    spec = _spec(ctx.attrs)
    written = write_raw_corpus(spec, ctx.out, progress=lambda pages: ctx.progress(pages, spec.pages, "pages"))
    summary = {"pages": spec.pages, "kinds": written.kinds, "files": list(written.files), "bytes": written.bytes}
    (ctx.out / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


def _pages_headline(out: Path) -> str | None:
    summary = json.loads((out / SUMMARY).read_text())
    return f"{summary['pages']:,} pages in {len(summary['files'])} WARC files, {summary['bytes']:,} bytes"


synthetic_web_pages = Rule(
    name="synthetic_web_pages",
    impl=_synthetic_web_pages,
    execution=Execution.SUBPROCESS,
    external_inputs=_pool_inputs,
    validate=_check_web_pages,
    packages=("warcio", "humanize"),
    code_modules=("rules.webdata.raw_corpus",),
    metrics_file=SUMMARY,
    headline=_pages_headline,
    resources=Resources(cpu=1),
    doc=(
        "WARC files of generated web pages, offline and deterministic: the Python docs' and standard "
        "library's text in the boilerplate of made-up sites, with exact and near duplicates, boilerplate, "
        "low-quality, non-English and malformed pages injected at the given rates. Output: "
        "warc/part-*.warc.gz, ground_truth.jsonl (each page's kind, and the original a copy copies) and "
        "summary.json (pages by kind)."
    ),
    attrs={**_SPEC_ATTRS, "python_version": PYTHON_VERSION},
)


# -- translated_phrases --------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"%(?:\([^)]*\))?[-+ #0-9.]*[a-zA-Z]")  # printf-style slots: "%d", "%(n)s"


def _phrases(locales: list[str]) -> Iterator[tuple[str, list[str]]]:
    """(locale, phrases) of the catalogs asked for (all when none), placeholders taken out and
    phrases without a letter ("%d", ".") left out."""
    from rules.webdata.raw_corpus import translations

    found = dict(translations())
    unknown = sorted(set(locales) - set(found))
    if unknown:
        raise StepFailed(f"humanize has no catalog for {', '.join(unknown)}: its locales are {', '.join(found)}")
    for locale in locales or list(found):
        phrases = [" ".join(_PLACEHOLDER.sub("", phrase).split()) for phrase in found[locale]]
        yield locale, [phrase for phrase in phrases if any(character.isalpha() for character in phrase)]


def _translated_phrases(ctx: Context) -> None:
    per_document = ctx.attrs["phrases_per_document"]
    locales: list[str] = []

    def documents() -> Iterator[str]:
        for locale, phrases in _phrases(ctx.attrs["locales"]):
            locales.append(locale)
            for start in range(0, len(phrases), per_document):
                yield ". ".join(phrases[start : start + per_document]) + "."

    write_corpus(
        ctx.out,
        documents(),
        sample_count=ctx.attrs["sample_count"],
        validation_fraction=ctx.attrs["validation_fraction"],
        progress=ctx.progress,
        source={"humanize_locales": locales, "phrases_per_document": per_document},
    )


def _check_phrases(attrs: Mapping[str, JsonValue]) -> None:
    if attrs["phrases_per_document"] < 1:
        raise ValueError(f"phrases_per_document must be positive, got {attrs['phrases_per_document']}")
    check_corpus_attrs(attrs)


def _catalogs(_attrs: Mapping[str, JsonValue]) -> Mapping[str, Path]:
    from rules.webdata.raw_corpus import humanize_catalogs

    return humanize_catalogs()


translated_phrases = Rule(
    name="translated_phrases",
    impl=_translated_phrases,
    execution=Execution.SUBPROCESS,
    external_inputs=_catalogs,
    validate=_check_phrases,
    packages=("humanize",),
    metrics_file=SUMMARY,
    doc=(
        "A corpus of non-English text every machine has: the translated phrases of humanize's message "
        "catalogs (36 locales), `phrases_per_document` to a document. Output: train/ and validation/ "
        "JSONL shards and summary.json, the layout of every data rule."
    ),
    attrs={
        "locales": Attr(types.STRING_LIST, default=[], doc="humanize's locales to take ('de_DE', 'fr_FR'); [] all."),
        "phrases_per_document": Attr(types.INT, default=12, doc="Phrases joined into one document."),
        **CORPUS_ATTRS,
    },
)
