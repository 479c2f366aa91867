"""Data rules: where a training corpus comes from.

Every rule here writes the same layout (see `rules.corpus_shards`): `train/` and
`validation/` directories of JSONL shards `shard-00000.jsonl`, ... with one
`{"text": ...}` a line, and `summary.json` holding
`{"documents": {"train": N, "validation": M}, "shards": {...}, "source": {...}, ...}`.
`sample_count` keeps only the first N documents for quick runs; it is part of the key,
so changing it reruns everything downstream.
"""

from __future__ import annotations

import functools
import os
import platform
import sysconfig
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from marinbuild.hashing import digest_bytes
from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.context import Context, StepFailed
from marinbuild.targets.rule import Execution, Rule
from rules.corpus_shards import CORPUS_ATTRS, check_corpus_attrs, json_lines, write_corpus
from rules.hub import ALLOW_UNPINNED, HUB_ENV, check_pinned, resolved_commit, snapshot

TEXT_FORMATS = ("jsonl", "text", "parquet")


def _corpus_from(ctx: Context, documents: Iterator[str], source: Mapping[str, Any]) -> None:
    write_corpus(
        ctx.out,
        documents,
        sample_count=ctx.attrs["sample_count"],
        validation_fraction=ctx.attrs["validation_fraction"],
        progress=ctx.progress,
        source=source,
    )


# -- text_files ---------------------------------------------------------------------------


def _documents_in(file: BinaryIO, name: str, text_format: str, text_key: str) -> Iterator[str]:
    if text_format == "text":
        yield file.read().decode("utf-8", errors="replace")
    elif text_format == "jsonl":
        for number, record in json_lines(file, name):
            if not isinstance(record, dict) or not isinstance(record.get(text_key), str):
                raise StepFailed(f"{name}:{number}: expected an object with a string field {text_key!r}")
            yield record[text_key]
    else:
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(file)
        if text_key not in parquet.schema_arrow.names:
            raise StepFailed(f"{name}: no column {text_key!r} (columns: {parquet.schema_arrow.names})")
        for batch in parquet.iter_batches(columns=[text_key]):
            yield from (text for text in batch.column(0).to_pylist() if text is not None)


def _input_name(label: str, path: Path, root: Path) -> str:
    """How the summary names an input file: a source by its name in its package, an output by its path."""
    return label.rpartition(":")[2] if path == root else path.relative_to(root).as_posix()


def _text_files(ctx: Context) -> None:
    import fsspec

    if ctx.attrs["srcs"]:
        named = {
            _input_name(label, path, ctx.root(label)): path for label in ctx.attrs["srcs"] for path in ctx.files(label)
        }
        names = list(named)
        files = fsspec.open_files([str(path) for path in named.values()], mode="rb", compression="infer")
    else:
        files = fsspec.open_files(list(ctx.attrs["urls"]), mode="rb", compression="infer")
        names = [file.full_name for file in files]
    if not files:
        raise StepFailed(f"no files match {ctx.attrs['urls']}")

    def documents() -> Iterator[str]:
        for file, name in zip(files, names):
            with file as handle:
                yield from _documents_in(handle, name, ctx.attrs["format"], ctx.attrs["text_key"])

    _corpus_from(ctx, documents(), {"format": ctx.attrs["format"], "text_key": ctx.attrs["text_key"], "files": names})


def _check_text_files(attrs: Mapping[str, JsonValue]) -> None:
    if bool(attrs["srcs"]) == bool(attrs["urls"]):
        raise ValueError("give exactly one of srcs (workspace files or targets) and urls (fsspec URLs or globs)")
    if attrs["format"] not in TEXT_FORMATS:
        raise ValueError(f"format must be one of {list(TEXT_FORMATS)}, got {attrs['format']!r}")
    check_corpus_attrs(attrs)


text_files = Rule(
    name="text_files",
    impl=_text_files,
    execution=Execution.SUBPROCESS,
    packages=("fsspec", "gcsfs", "pyarrow"),
    validate=_check_text_files,
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
    import datasets

    attrs = ctx.attrs
    directory = snapshot(attrs["repo"], attrs["revision"], "dataset")
    try:
        dataset = datasets.load_dataset(
            str(directory),
            name=attrs["subset"],
            split=attrs["split"],
            streaming=True,
            cache_dir=str(ctx.tmp / "datasets"),
        )
    except (ValueError, FileNotFoundError) as error:
        raise StepFailed(
            f"cannot read split {attrs['split']!r} of {attrs['repo']} (subset {attrs['subset']!r}): {error}"
        ) from None
    text_key = attrs["text_key"]
    if dataset.column_names is not None and text_key not in dataset.column_names:
        raise StepFailed(f"{attrs['repo']} has no column {text_key!r} (columns: {dataset.column_names}); set text_key")
    source = {
        "repo": attrs["repo"],
        "commit": resolved_commit(directory),
        "subset": attrs["subset"],
        "split": attrs["split"],
        "text_key": text_key,
    }
    _corpus_from(ctx, (row[text_key] or "" for row in dataset), source)


def _check_hf_dataset(attrs: Mapping[str, JsonValue]) -> None:
    check_pinned(attrs)
    check_corpus_attrs(attrs)


hf_dataset = Rule(
    name="hf_dataset",
    impl=_hf_dataset,
    execution=Execution.SUBPROCESS,
    env=HUB_ENV,
    packages=("datasets", "huggingface_hub"),
    validate=_check_hf_dataset,
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

# The interpreter the build runs on; its standard library is the corpus.
RUNNING_PYTHON = f"{platform.python_implementation()} {platform.python_version()}"
# The attribute of a rule whose output depends on the interpreter (its standard library is
# read, its version recorded): the key holds the version, and the step checks it runs on it.
PYTHON_VERSION = Attr(types.STRING, default=RUNNING_PYTHON, doc="Set by marinbuild; part of the key.")
_SKIPPED_DIRECTORIES = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}


@functools.cache
def stdlib_files(root: Path) -> tuple[Path, ...]:
    """The standard library's .py files, tests skipped, in a stable order.

    Planning asks for them for every target that reads the standard library (its external
    inputs), so they are listed once a process, and the skipped directories are never
    entered: a walk through site-packages made a no-op build of experiments/datamix spend
    ten seconds here."""
    found = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [name for name in subdirectories if name not in _SKIPPED_DIRECTORIES]
        found += [Path(directory, name) for name in files if name.endswith(".py") and not name.startswith("test_")]
    return tuple(sorted(found))


def chunk_lines(text: str, limit: int) -> Iterator[str]:
    """`text` in pieces of at most `limit` characters, cut at line ends (a longer line is cut)."""
    piece: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        while len(line) > limit:
            yield line[:limit]
            line = line[limit:]
        if size + len(line) > limit:
            yield "".join(piece)
            piece, size = [], 0
        piece.append(line)
        size += len(line)
    if piece:
        yield "".join(piece)


def check_running_python(ctx: Context) -> None:
    """In the step: the interpreter running it is the one its key names (PYTHON_VERSION)."""
    if ctx.attrs["python_version"] != RUNNING_PYTHON:
        raise StepFailed(f"this step runs on {RUNNING_PYTHON}, but its key says {ctx.attrs['python_version']}")


def check_python_version(attrs: Mapping[str, JsonValue]) -> None:
    """At load: PYTHON_VERSION was left to marinbuild (a ValueError names the BUILD line)."""
    if attrs["python_version"] != RUNNING_PYTHON:
        raise ValueError(
            f"python_version is set by marinbuild to the running interpreter ({RUNNING_PYTHON}); leave it out"
        )


def _python_corpus(ctx: Context) -> None:
    check_running_python(ctx)
    root = Path(sysconfig.get_paths()["stdlib"])
    digests: dict[str, str] = {}  # filled while documents are read, written into the summary after

    def documents() -> Iterator[str]:
        for path in stdlib_files(root):
            data = path.read_bytes()
            name = path.relative_to(root).as_posix()
            digests[name] = digest_bytes(data)
            yield from chunk_lines(data.decode("utf-8", errors="replace"), ctx.attrs["chunk_characters"])

    _corpus_from(ctx, documents(), {"python": RUNNING_PYTHON, "files": digests})


def _check_python_corpus(attrs: Mapping[str, JsonValue]) -> None:
    check_python_version(attrs)
    if attrs["chunk_characters"] < 1:
        raise ValueError(f"chunk_characters must be positive, got {attrs['chunk_characters']}")
    check_corpus_attrs(attrs)


def stdlib_inputs(_attrs: Mapping[str, JsonValue]) -> dict[str, Path]:
    """The standard library's files by their path in it: what the rules that read it
    (python_corpus, chat_data) declare as external inputs, and read in this order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return {path.relative_to(root).as_posix(): path for path in stdlib_files(root)}


python_corpus = Rule(
    name="python_corpus",
    impl=_python_corpus,
    external_inputs=stdlib_inputs,
    execution=Execution.SUBPROCESS,
    validate=_check_python_corpus,
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
