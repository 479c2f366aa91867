"""The data rules: where a training corpus comes from (`text_files`, `hf_dataset`,
`python_corpus`).

Every one writes the layout of rules/common/corpus.py: `train/` and `validation/`
directories of JSONL shards with one `{"text": ...}` a line, and `summary.json` with the
document counts and where they came from. `sample_count` keeps only the first N documents
for quick runs; it is part of the key, so changing it reruns everything downstream.

Declared here, cheap to import; the steps are sources.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.context import Context
from marinbuild.targets.rule import Execution, Rule
from rules.common.corpus import CORPUS_ATTRS, SUMMARY, check_corpus_attrs
from rules.common.hub import ALLOW_UNPINNED, HUB_ENV, check_pinned
from rules.common.stdlib import PYTHON_VERSION, check_python_version, stdlib_inputs

TEXT_FORMATS = ("jsonl", "text", "parquet")
_STEPS = ("rules.data.sources",)

# -- text_files -----------------------------------------------------------------------------


def _text_files(ctx: Context) -> None:
    from rules.data.sources import text_files as read

    read(ctx)


def _check_text_files(attrs: Mapping[str, JsonValue]) -> None:
    if bool(attrs["srcs"]) == bool(attrs["urls"]):
        raise ValueError("give exactly one of srcs (workspace files or targets) and urls (fsspec URLs or globs)")
    if attrs["format"] not in TEXT_FORMATS:
        raise ValueError(f"format must be one of {list(TEXT_FORMATS)}, got {attrs['format']!r}")
    check_corpus_attrs(attrs)


text_files = Rule(
    name="text_files",
    metrics_file=SUMMARY,
    impl=_text_files,
    execution=Execution.SUBPROCESS,
    packages=("fsspec", "gcsfs", "pyarrow"),
    validate=_check_text_files,
    code_modules=_STEPS,
    doc=(
        "A corpus from local files or fsspec URLs (gs://..., globs allowed) in JSONL, plain text "
        "(a file is a document) or Parquet. Output: train/ and validation/ JSONL shards of "
        "{'text': ...} lines and summary.json. URLs are identified by their string: point them "
        "at data that never changes."
    ),
    attrs={
        "srcs": Attr(types.LABEL_LIST, default=[], doc="Workspace files or targets (e.g. a glob())."),
        "urls": Attr(types.STRING_LIST, default=[], doc="fsspec URLs or globs, read in sorted order."),
        "format": Attr(types.STRING, default="jsonl", doc="'jsonl', 'text' or 'parquet'."),
        "text_key": Attr(types.STRING, default="text", doc="The field (JSONL) or column (Parquet) holding the text."),
        **CORPUS_ATTRS,
    },
)


# -- hf_dataset -----------------------------------------------------------------------------


def _hf_dataset(ctx: Context) -> None:
    from rules.data.sources import hf_dataset as read

    read(ctx)


def _check_hf_dataset(attrs: Mapping[str, JsonValue]) -> None:
    check_pinned(attrs)
    check_corpus_attrs(attrs)


hf_dataset = Rule(
    name="hf_dataset",
    metrics_file=SUMMARY,
    impl=_hf_dataset,
    execution=Execution.SUBPROCESS,
    env=HUB_ENV,
    packages=("datasets", "huggingface_hub"),
    validate=_check_hf_dataset,
    code_modules=_STEPS,
    doc=(
        "A corpus from a Hugging Face dataset snapshot pinned to a commit (HF_HUB_CACHE and "
        "HF_HUB_OFFLINE apply). Output: train/ and validation/ JSONL shards of {'text': ...} "
        "lines and summary.json; the validation split is held out of `split`."
    ),
    attrs={
        "repo": Attr(types.STRING, doc="'org/name' on the Hub."),
        "revision": Attr(types.STRING, doc="A 40-hex commit id (a branch needs allow_unpinned)."),
        "split": Attr(types.STRING, default="train"),
        "subset": Attr(types.STRING, default=None, doc="The dataset's configuration name, if it has several."),
        "text_key": Attr(types.STRING, default="text", doc="The column holding the text."),
        "allow_unpinned": ALLOW_UNPINNED,
        **CORPUS_ATTRS,
    },
)


# -- python_corpus --------------------------------------------------------------------------


def _python_corpus(ctx: Context) -> None:
    from rules.data.sources import python_corpus as read

    read(ctx)


def _check_python_corpus(attrs: Mapping[str, JsonValue]) -> None:
    check_python_version(attrs)
    if attrs["chunk_characters"] < 1:
        raise ValueError(f"chunk_characters must be positive, got {attrs['chunk_characters']}")
    check_corpus_attrs(attrs)


python_corpus = Rule(
    name="python_corpus",
    metrics_file=SUMMARY,
    impl=_python_corpus,
    external_inputs=stdlib_inputs,
    execution=Execution.SUBPROCESS,
    validate=_check_python_corpus,
    code_modules=_STEPS,
    doc=(
        "The default corpus, on any machine and offline: the running interpreter's standard "
        "library (tests skipped), cut into documents of at most chunk_characters at line ends. "
        "The key holds the Python version and the digest of every file read (as external "
        "inputs), and summary.json lists them too. Output: train/ and validation/ JSONL "
        "shards of {'text': ...} lines and summary.json."
    ),
    attrs={
        "chunk_characters": Attr(types.INT, default=4000, doc="The longest document, in characters."),
        "python_version": PYTHON_VERSION,
        **CORPUS_ATTRS,
    },
)
