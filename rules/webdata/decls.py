"""The web-data rules: raw pages every machine has (`synthetic_web_pages`,
`translated_phrases`), their main text (`extract_text`), a chain of filters
(`filter_text`), fastText classifiers (`train_fasttext`, `train_quality_classifier`), a
corpus scored and cut (`score_quality`), and deduplication across shards (`dedup`).

Declared here: loading BUILD files imports this module, so it imports no heavy library
at top level. A filter chain, a dedup config and a quality classifier's settings are
checked as a BUILD file loads (blocks/filters, blocks/dedup/config.py, blocks/quality.py:
they import numpy and fastText only where used); the checks of extract_text and
synthetic_web_pages import Resiliparse and warcio. Each rule's step is the module of its
name, which a running step imports.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marinbuild.targets import Attr, Execution, Resources, Rule
from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import AttrError, JsonValue
from marinbuild.targets.context import Context
from rules.common.corpus import CORPUS_ATTRS, SUMMARY, check_corpus_attrs
from rules.common.headline import json_headline
from rules.common.stdlib import PYTHON_VERSION, check_python_version, check_running_python
from rules.webdata.blocks.dedup.config import DedupConfig
from rules.webdata.blocks.fasttext import HYPERPARAMETERS, LABEL, hyperparameter_problems
from rules.webdata.blocks.filters.chain import make_filter
from rules.webdata.blocks.filters.scores import QualityThreshold, with_model
from rules.webdata.blocks.quality import QualityHyperparameters
from rules.webdata.constants import FORMATS, LANGUAGE_MODEL

_DOCUMENTS = "rules.webdata.blocks.documents"

# -- synthetic_web_pages -------------------------------------------------------------------

# The attributes that make a `raw_corpus.pages.RawCorpusSpec`, by its field names.
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
    from rules.webdata.blocks.raw_corpus.pages import RawCorpusSpec

    return RawCorpusSpec(**{name: attrs[name] for name in _SPEC_ATTRS})


def _check_web_pages(attrs: Mapping[str, JsonValue]) -> None:
    check_python_version(attrs)
    _spec(attrs)  # its ValueError (a rate out of range...) names the BUILD line


def _pool_inputs(attrs: Mapping[str, JsonValue]) -> Mapping[str, Path]:
    from rules.webdata.blocks.raw_corpus.pool import pool_sources

    return pool_sources(attrs["stdlib_modules"])


def _synthetic_web_pages(ctx: Context) -> None:
    from rules.webdata.blocks.raw_corpus.warc import write_raw_corpus

    check_running_python(ctx)
    spec = _spec(ctx.attrs)
    written = write_raw_corpus(spec, ctx.out, progress=lambda pages: ctx.progress(pages, spec.pages, "pages"))
    summary = {"pages": spec.pages, "kinds": written.kinds, "files": list(written.files), "bytes": written.bytes}
    (ctx.out / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


def _pages_headline(out: Path) -> str | None:
    return json_headline(
        out / SUMMARY,
        lambda summary: f"{summary['pages']:,} pages in {len(summary['files'])} WARC files, {summary['bytes']:,} bytes",
    )


synthetic_web_pages = Rule(
    name="synthetic_web_pages",
    impl=_synthetic_web_pages,
    execution=Execution.SUBPROCESS,
    external_inputs=_pool_inputs,
    validate=_check_web_pages,
    packages=("warcio", "humanize"),
    code_modules=(
        "rules.webdata.blocks.raw_corpus.pool",
        "rules.webdata.blocks.raw_corpus.sites",
        "rules.webdata.blocks.raw_corpus.pages",
        "rules.webdata.blocks.raw_corpus.warc",
    ),
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


def _translated_phrases(ctx: Context) -> None:
    from rules.webdata.translated_phrases import translated_phrases as write

    write(ctx)


def _check_phrases(attrs: Mapping[str, JsonValue]) -> None:
    if attrs["phrases_per_document"] < 1:
        raise ValueError(f"phrases_per_document must be positive, got {attrs['phrases_per_document']}")
    check_corpus_attrs(attrs)


def _catalogs(_attrs: Mapping[str, JsonValue]) -> Mapping[str, Path]:
    from rules.webdata.blocks.raw_corpus.pool import humanize_catalogs

    return humanize_catalogs()


translated_phrases = Rule(
    name="translated_phrases",
    impl=_translated_phrases,
    execution=Execution.SUBPROCESS,
    external_inputs=_catalogs,
    validate=_check_phrases,
    packages=("humanize",),
    code_modules=("rules.webdata.translated_phrases", "rules.webdata.blocks.raw_corpus.pool"),
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


# -- extract_text ----------------------------------------------------------------------------


def _extract_text(ctx: Context) -> None:
    from rules.webdata.extract_text import extract_text as extract

    extract(ctx)


def _check_extract(attrs: Mapping[str, JsonValue]) -> None:
    """At load: the format exists, there are inputs, the fraction and the limits are valid."""
    from rules.webdata.extract_text import extract_config

    if attrs["format"] not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(map(repr, FORMATS))}, got {attrs['format']!r}")
    if not attrs["srcs"]:
        raise ValueError("srcs is empty: give the WARC or HTML files, or targets that make them")
    if not 0 <= attrs["validation_fraction"] < 1:
        raise ValueError(f"validation_fraction must be at least 0 and below 1, got {attrs['validation_fraction']}")
    extract_config(attrs)


def _extract_headline(out: Path) -> str | None:
    def describe(summary: Mapping[str, Any]) -> str:
        skipped = sum(skip["count"] for skip in summary["skipped"].values())
        documents = sum(summary["documents"].values())
        return f"{documents:,} documents from {len(summary['files'])} files, {skipped:,} records skipped"

    return json_headline(out / SUMMARY, describe)


extract_text = Rule(
    name="extract_text",
    impl=_extract_text,
    attrs={
        "srcs": Attr(
            types.LABEL_LIST,
            default=[],
            doc="WARC or HTML files, or targets whose outputs hold them (synthetic_web_pages, a filegroup, "
            "an external directory): of a target, the files named *.warc, *.warc.gz (or *.html, *.htm).",
        ),
        "format": Attr(types.STRING, default="warc", doc="'warc' (response records) or 'html' (a file a page)."),
        "validation_fraction": Attr(
            types.FLOAT, default=0.01, doc="Share of documents held out for validation, chosen by a hash of their id."
        ),
        "max_payload_bytes": Attr(
            types.INT,
            default=None,
            doc="A larger page is skipped unread ('too large'): no DOM of 100 MB (None: 10 MiB).",
        ),
        "min_text_characters": Attr(
            types.INT, default=None, doc="A shorter main text counts as none ('no main text'; None: 1)."
        ),
        "max_nesting_depth": Attr(
            types.INT,
            default=None,
            doc="A page whose elements nest deeper is skipped ('too deeply nested'; None: 512, where browsers' "
            "parsers stop nesting).",
        ),
        "max_record_seconds": Attr(
            types.FLOAT,
            default=None,
            doc="CPU seconds one record may take, read to extracted; past them it is skipped ('over time budget') "
            "and the file goes on (None: 5).",
        ),
    },
    validate=_check_extract,
    # 2: HTTP codings undone and charsets found as browsers do; every record a document or a
    # counted skip, numbered in its file; a budget of depth and time per record.
    version=2,
    resources=Resources(cpu=2),
    sharded=True,
    packages=("resiliparse", "fastwarc", "brotli", "zstandard"),
    code_modules=(
        "rules.webdata.extract_text",
        "rules.webdata.blocks.extract",
        "rules.webdata.blocks.extract_worker",
        "rules.webdata.blocks.http_body",
        "rules.webdata.blocks.charsets",
        _DOCUMENTS,
    ),
    metrics_file=SUMMARY,
    headline=_extract_headline,
    doc=(
        "The main text of web pages (Resiliparse), a unit per WARC or HTML file. Output: train/ and "
        "validation/ shards of {'text', 'id', 'url', 'metadata'} lines, and summary.json (documents, "
        "skips by reason, each file's shard and counts)."
    ),
)


# -- filter_text -----------------------------------------------------------------------------


def _filter_text(ctx: Context) -> None:
    from rules.webdata.filter_text import filter_text as run

    run(ctx)


def _check_filters(attrs: Mapping[str, JsonValue]) -> None:
    """At load: every filter exists and its parameters are valid, and the language filter
    and its model come together (an error at the BUILD line)."""
    filters = attrs["filters"]
    if not isinstance(filters, list) or not filters:
        raise AttrError("filters must be a non-empty list of filters, e.g. [{'name': 'gopher_quality'}]")
    language = [spec for spec in filters if isinstance(spec, Mapping) and spec.get("name") == "language"]
    if any("model" in spec for spec in language):
        raise AttrError(
            "the language filter takes its model from the step's language_model attribute, a label "
            "(a train_fasttext target, an external directory or a file), not from a 'model' in its spec"
        )
    if language and attrs[LANGUAGE_MODEL] is None:
        raise AttrError("the language filter needs language_model: the label of its fastText model")
    if attrs[LANGUAGE_MODEL] is not None and not language:
        raise AttrError("language_model is given, but no filter of the chain is 'language'")
    if len(language) > 1:
        raise AttrError("the chain has two language filters: one model, one filter")
    for spec in filters:
        make_filter(with_model(spec, LANGUAGE_MODEL))


filter_text = Rule(
    name="filter_text",
    impl=_filter_text,
    attrs={
        "data": Attr(types.LABEL, doc="A corpus: the output of a data rule (train/, validation/, summary.json)."),
        "filters": Attr(
            types.JSON,
            doc="The chain, in order: [{'name': 'gopher_quality', 'min_words': 50}, {'name': 'c4_quality'}, ...]; "
            "a filter's parameters are checked when the BUILD file loads.",
        ),
        LANGUAGE_MODEL: Attr(
            types.OPTIONAL_LABEL,
            default=None,
            omit_default=True,
            doc="The language filter's fastText model: a train_fasttext target, an external directory or a "
            "file holding one *.bin or *.ftz file.",
        ),
    },
    validate=_check_filters,
    version=2,  # each unit counts the scores of the filters with a threshold
    resources=Resources(cpu=2),
    sharded=True,
    metrics_file=SUMMARY,
    code_modules=(
        "rules.webdata.filter_text",
        "rules.webdata.blocks.filters.base",
        "rules.webdata.blocks.filters.gopher",
        "rules.webdata.blocks.filters.c4",
        "rules.webdata.blocks.filters.scores",
        "rules.webdata.blocks.filters.chain",
        _DOCUMENTS,
    ),
)


# -- train_fasttext --------------------------------------------------------------------------


def _train_fasttext(ctx: Context) -> None:
    from rules.webdata.train_fasttext import train_fasttext as train

    train(ctx)


def _check_fasttext(attrs: Mapping[str, JsonValue]) -> None:
    """At load: labels fastText can hold, two of them at least, and valid hyper-parameters."""
    labels = list(attrs["data"].values())
    bad = [label for label in labels if not isinstance(label, str) or not LABEL.fullmatch(label)]
    if bad:
        raise ValueError(f"data maps each corpus to a label of letters, digits, '_' or '-', got {bad[0]!r}")
    if len(set(labels)) < 2:
        raise ValueError(f"data needs at least two labels to tell apart, got {sorted(set(labels))}")
    problems = hyperparameter_problems(attrs["hyperparameters"])
    if problems:
        raise ValueError("hyperparameters: " + "; ".join(problems))


def _fasttext_headline(out: Path) -> str | None:
    def describe(summary: Mapping[str, Any]) -> str | None:
        scores = [f"{label} F1 {item['f1score']:.3f}" for label, item in summary["labels"].items() if "f1score" in item]
        return "validation: " + ", ".join(scores) if scores else None

    return json_headline(out / SUMMARY, describe)


train_fasttext = Rule(
    name="train_fasttext",
    impl=_train_fasttext,
    execution=Execution.SUBPROCESS,
    validate=_check_fasttext,
    packages=("fasttext-numpy2",),
    code_modules=("rules.webdata.train_fasttext", "rules.webdata.blocks.fasttext", _DOCUMENTS),
    metrics_file=SUMMARY,
    headline=_fasttext_headline,
    resources=Resources(cpu=1),
    doc=(
        "A supervised fastText classifier of documents, trained on the train splits of labelled corpora "
        "(one thread: the same inputs give the same model). Output: model.bin, and summary.json (documents "
        "per label, and precision, recall and F1 per label on the validation splits)."
    ),
    attrs={
        "data": Attr(
            types.LABEL_KEYED_DICT, doc="Each corpus (a data rule's output) and its label: {':english': 'en', ...}."
        ),
        "hyperparameters": Attr(
            HYPERPARAMETERS,
            default=HYPERPARAMETERS.normalize({}, ""),
            doc="fastText's settings: epoch, lr, dim, word_ngrams, minn, maxn, ... (each defaulted)",
        ),
    },
)


# -- train_quality_classifier and score_quality ---------------------------------------------


def _train_quality_classifier(ctx: Context) -> None:
    from rules.webdata.train_quality_classifier import train_quality_classifier as train

    train(ctx)


def _check_training(attrs: Mapping[str, JsonValue]) -> None:
    QualityHyperparameters.from_spec(attrs["hyperparameters"])


train_quality_classifier = Rule(
    name="train_quality_classifier",
    impl=_train_quality_classifier,
    attrs={
        "positive": Attr(types.LABEL, doc="A corpus of what good data looks like (its train split is read)."),
        "negative": Attr(types.LABEL, doc="A corpus of what the classifier should score low."),
        "hyperparameters": Attr(
            types.JSON,
            default={},
            doc="fastText's: epoch, lr, word_ngrams, dim, min_count, bucket, seed (rules.webdata.blocks.quality).",
        ),
    },
    validate=_check_training,
    code_modules=("rules.webdata.train_quality_classifier", "rules.webdata.blocks.quality", _DOCUMENTS),
    metrics_file=SUMMARY,
)


def _score_quality(ctx: Context) -> None:
    from rules.webdata.score_quality import score_quality as score

    score(ctx)


def _check_scoring(attrs: Mapping[str, JsonValue]) -> None:
    threshold, top = attrs["threshold"], attrs["top_fraction"]
    if (threshold is None) == (top is None):
        raise AttrError("score_quality takes either threshold or top_fraction, not both nor neither")
    if threshold is not None:
        QualityThreshold(threshold=threshold)
    elif not 0 < top <= 1:
        raise AttrError(f"top_fraction must be above 0 and at most 1, got {top}")


score_quality = Rule(
    name="score_quality",
    impl=_score_quality,
    attrs={
        "data": Attr(types.LABEL, doc="A corpus: the output of a data rule."),
        "classifier": Attr(types.LABEL, doc="A train_quality_classifier target."),
        "threshold": Attr(types.FLOAT, default=None, doc="Keep documents scoring at least this."),
        "top_fraction": Attr(types.FLOAT, default=None, doc="Keep this share of the corpus's best documents."),
    },
    validate=_check_scoring,
    code_modules=("rules.webdata.score_quality", "rules.webdata.blocks.quality", _DOCUMENTS),
    version=2,  # each score unit notes its scores' count and extremes
    resources=Resources(cpu=2),
    sharded=True,
    metrics_file=SUMMARY,
)


# -- dedup -----------------------------------------------------------------------------------


def _dedup(ctx: Context) -> None:
    from rules.webdata.dedup import dedup as run

    run(ctx)


def _check_dedup(attrs: Mapping[str, JsonValue]) -> None:
    """At load: at least one input, and a valid dedup config (an error at the BUILD line)."""
    if not attrs["data"]:
        raise AttrError("dedup: data must list at least one corpus")
    DedupConfig.from_spec(attrs["exact"], attrs["fuzzy"], attrs["paragraphs"])
    if attrs["reduce_documents"] < 1:
        raise AttrError(f"dedup: reduce_documents must be at least 1, got {attrs['reduce_documents']}")


dedup = Rule(
    name="dedup",
    impl=_dedup,
    # 2: a near duplicate is removed only if it is like its cluster's kept document;
    # 3: candidate_pairs counted once per band a pair shares (the same in units), below_threshold gone
    version=3,
    attrs={
        "data": Attr(types.LABEL_LIST, doc="Corpora (outputs of data rules), deduplicated together, in this order."),
        "exact": Attr(types.BOOL, default=True, doc="Remove documents whose normalised text another has."),
        "fuzzy": Attr(
            types.JSON,
            default=True,
            doc="Near duplicates by MinHash LSH: {'ngram': 5, 'bands': 25, 'rows': 4, 'threshold': 0.6, "
            "'seed': 0} (any of them), True for these defaults, False for off.",
        ),
        "paragraphs": Attr(
            types.JSON,
            default=False,
            doc="Paragraph dedup by a Bloom filter: {'false_positive_rate': 0.001}, True for it, False for off.",
        ),
        # How the reduce runs, not what it decides: the same decisions either way.
        "reduce_documents": Attr(
            types.INT,
            default=1_000_000,
            identity=False,
            doc="The most documents the reduce holds in one process (about 170 MB at 1,000,000): a corpus of "
            "more is reduced in units of about this many documents each, on the local pool or, with "
            "--executor ray, as Ray tasks (docs/cluster.md#at-scale).",
        ),
    },
    validate=_check_dedup,
    code_modules=(
        "rules.webdata.dedup",
        "rules.webdata.blocks.dedup.signatures",
        "rules.webdata.blocks.dedup.clusters",
        "rules.webdata.blocks.dedup.partitioned",
        "rules.webdata.blocks.dedup.apply",
        _DOCUMENTS,
    ),
    resources=Resources(cpu=2),
    sharded=True,
    metrics_file=SUMMARY,
)
