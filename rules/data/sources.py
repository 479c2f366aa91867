"""The steps of the data rules: each reads its source's documents into the corpus layout
(rules/common/corpus.py)."""

from __future__ import annotations

import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from marinbuild.hashing import digest_bytes
from marinbuild.targets.context import Context, StepFailed
from rules.common.corpus import corpus_from, json_lines
from rules.common.hub import resolved_commit, snapshot
from rules.common.stdlib import RUNNING_PYTHON, check_running_python, stdlib_files

# -- text_files -----------------------------------------------------------------------------


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


def text_files(ctx: Context) -> None:
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

    corpus_from(ctx, documents(), {"format": ctx.attrs["format"], "text_key": ctx.attrs["text_key"], "files": names})


# -- hf_dataset -----------------------------------------------------------------------------


def hf_dataset(ctx: Context) -> None:
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
    corpus_from(ctx, (row[text_key] or "" for row in dataset), source)


# -- python_corpus --------------------------------------------------------------------------


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


def python_corpus(ctx: Context) -> None:
    check_running_python(ctx)
    root = Path(sysconfig.get_paths()["stdlib"])
    digests: dict[str, str] = {}  # filled while documents are read, written into the summary after

    def documents() -> Iterator[str]:
        for path in stdlib_files(root):
            data = path.read_bytes()
            name = path.relative_to(root).as_posix()
            digests[name] = digest_bytes(data)
            yield from chunk_lines(data.decode("utf-8", errors="replace"), ctx.attrs["chunk_characters"])

    corpus_from(ctx, documents(), {"python": RUNNING_PYTHON, "files": digests})
