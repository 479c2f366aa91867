"""`extract_text`: the main text of web pages (WARC files or HTML files), file by file.

A sharded rule (docs/rules.md#sharded-steps): each input file is a unit of its own, keyed
by its content, its name (which names its skips, and is an HTML page's id) and the
extraction's parameters, so adding a file extracts only that file. Each unit extracts its
file's records (`extract.warc_outcomes`, or `html_outcome`) in children forked from its
process that bound each record's CPU time (`extract_worker`) and write the documents it
kept, with their URL and metadata (WARC record id, date, content type), split into train
and validation; the unit writes what it skipped, by reason: a record of another type than
response, no HTTP response, not HTML, too large, cut short, empty, in a coding or charset
that cannot be undone, nested too deep, over its time, or without main text, and a WARC
file whose framing breaks (its earlier records kept). A file that is not a WARC file at
all fails its unit, which names it: it is a wrong input, not a bad record.

Which split a document goes to is a function of its id alone — validation when the first
64 bits of BLAKE3(id), as a fraction of 2^64, fall below `validation_fraction` — so a file
added moves no document of another file, and every other unit (and shard downstream)
keeps its key. Each unit's documents become one shard per split, named after the unit's
key (`train/shard-<key>.jsonl`), a name that no other file's arrival changes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from marinbuild.hashing import digest_bytes
from marinbuild.targets import Attr, Resources, Rule, ShardResult, ShardUnit
from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import JsonValue
from marinbuild.targets.context import Context, StepFailed
from rules.corpus_shards import SPLITS, SUMMARY
from rules.webdata.documents import Document

FORMATS = {"warc": (".warc", ".warc.gz"), "html": (".html", ".htm")}  # format -> the suffixes of its files
_COUNTS = "counts.json"  # a unit's counts, beside its {split}.jsonl
_KEY_CHARACTERS = 16  # of a unit's key, in its shards' names
# The attributes that make an `extract.ExtractConfig`.
_CONFIG = ("max_payload_bytes", "min_text_characters", "max_nesting_depth", "max_record_seconds")


def held_out(document_id: str, fraction: float) -> bool:
    """Whether the document of this id is in the validation split: a function of the id alone."""
    return int(digest_bytes(document_id.encode())[:16], 16) < fraction * 2**64


def _config(attrs: Mapping[str, JsonValue]) -> Any:
    """The extraction's settings; `extract` (Resiliparse, FastWARC) is imported here, when a
    BUILD file declares such a target or a unit runs."""
    from rules.webdata.extract import ExtractConfig

    return ExtractConfig(**{name: attrs[name] for name in _CONFIG if attrs[name] is not None})


def _check(attrs: Mapping[str, JsonValue]) -> None:
    """At load: the format exists, there are inputs, the fraction and the limits are valid."""
    if attrs["format"] not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(map(repr, FORMATS))}, got {attrs['format']!r}")
    if not attrs["srcs"]:
        raise ValueError("srcs is empty: give the WARC or HTML files, or targets that make them")
    if not 0 <= attrs["validation_fraction"] < 1:
        raise ValueError(f"validation_fraction must be at least 0 and below 1, got {attrs['validation_fraction']}")
    _config(attrs)


# -- a unit: one file -------------------------------------------------------------------------


def extract_file(ctx: Context) -> None:
    """One unit: the documents of one file, by split, and its skips."""
    from rules.webdata.extract import is_warc

    path, name, fmt = ctx.location("file"), ctx.attrs["name"], ctx.attrs["format"]
    if fmt == "warc" and not is_warc(path):
        raise StepFailed(f"{name} is not a WARC file: it does not begin with a WARC record ('WARC/1.0' ...)")
    counts = extract_into(
        ctx.out,
        path,
        fmt,
        name,
        _config(ctx.attrs),
        ctx.attrs["validation_fraction"],
        lambda done: ctx.progress(done, None, "docs"),
    )
    ctx.progress(sum(counts["documents"].values()), None, "docs")
    (ctx.out / _COUNTS).write_text(json.dumps(counts))


def extract_into(
    out: Path, path: Path, fmt: str, name: str, config: Any, fraction: float, progress: Callable[[int], None]
) -> dict[str, Any]:
    """The documents of one file into `out`/{split}.jsonl, a JSON line each, its records
    extracted in a child that bounds each one's time (`extract_worker`); returns the
    documents by split and the skips (what counts.json holds)."""
    from rules.webdata.extract_worker import budgeted_extraction

    def split(document: Document) -> str:
        return "validation" if held_out(document.id, fraction) else "train"

    with ExitStack() as files:
        outputs = {part: files.enter_context(open(out / f"{part}.jsonl", "wb", buffering=0)) for part in SPLITS}
        documents, skips = budgeted_extraction(path, fmt, name, config, outputs, split, progress)
    return {"documents": {part: documents[part] for part in SPLITS}, "skipped": skips.to_json()}


# -- the driver -------------------------------------------------------------------------------


def _unit_name(own_package: str, label: str, relative: str | None) -> str:
    """How a file is named in units, skips and the summary: its path in its package (a
    source file) or under its target's name (an output file), the whole label when it is
    not in the step's package."""
    package, _, name = label.partition(":")
    prefix = name if package == own_package else label
    return prefix if relative is None else f"{prefix}/{relative}"


def _files(ctx: Context, suffixes: tuple[str, ...]) -> Iterator[tuple[str, Path]]:
    """(name, path) of each input file: a source file as given, whatever its name; the files
    of a target's output (or an `external` directory) that end in one of `suffixes`."""
    own_package = ctx.label.partition(":")[0]
    for label in ctx.attrs["srcs"]:
        root = ctx.root(label)
        if root.is_file():
            yield _unit_name(own_package, label, None), root
            continue
        for path in sorted(ctx.files(label)):
            if path.name.endswith(suffixes):
                yield _unit_name(own_package, label, path.relative_to(root).as_posix()), path


def _extract_text(ctx: Context) -> None:
    """The driver: a unit per input file, then the corpus from their outputs."""
    fmt = ctx.attrs["format"]
    config = _config(ctx.attrs)  # defaults included: what each unit's key holds
    parameters = {
        "format": fmt,
        "validation_fraction": ctx.attrs["validation_fraction"],
        **{name: getattr(config, name) for name in _CONFIG},
    }
    units = [ShardUnit(name, {"file": path}, {**parameters, "name": name}) for name, path in _files(ctx, FORMATS[fmt])]
    if not units:
        raise StepFailed(f"srcs hold no {fmt} file (a name ending in {' or '.join(FORMATS[fmt])})")
    results = ctx.map_shards("rules.webdata.extract_text:extract_file", units)
    files: dict[str, dict[str, Any]] = {}
    for result in results:
        shard = f"shard-{result.key[:_KEY_CHARACTERS]}.jsonl"
        counts = result.read_json(_COUNTS)
        for split in SPLITS:
            if counts["documents"][split]:
                result.place(f"{split}.jsonl", ctx.out / split / shard)
        skipped = sum(skip["count"] for skip in counts["skipped"].values())
        files[result.name] = {"shard": shard, "documents": counts["documents"], "skipped": skipped}
    summary = _summary(results, files)
    if not summary["documents"]["train"]:
        raise StepFailed(f"no document extracted into the train split from {len(units)} files: {summary['skipped']}")
    (ctx.out / SUMMARY).write_text(json.dumps({**summary, "format": fmt}, indent=2, sort_keys=True) + "\n")


def _summary(results: list[ShardResult], files: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Documents and shards per split, skips by reason (each with where it was first met),
    and each input file's shard and counts."""
    documents: Counter[str] = Counter()
    shards: Counter[str] = Counter()
    skipped: dict[str, dict[str, Any]] = {}
    for result in results:
        counts = result.read_json(_COUNTS)
        for split in SPLITS:
            documents[split] += counts["documents"][split]
            shards[split] += bool(counts["documents"][split])
        for reason, skip in counts["skipped"].items():
            known = skipped.setdefault(reason, {"count": 0, "first": skip["first"]})
            known["count"] += skip["count"]
    return {
        "documents": {split: documents[split] for split in SPLITS},
        "shards": {split: shards[split] for split in SPLITS},
        "skipped": dict(sorted(skipped.items())),
        "files": dict(sorted(files.items())),
    }


def _headline(out: Path) -> str | None:
    summary = json.loads((out / SUMMARY).read_text())
    skipped = sum(skip["count"] for skip in summary["skipped"].values())
    documents = sum(summary["documents"].values())
    return f"{documents:,} documents from {len(summary['files'])} files, {skipped:,} records skipped"


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
    validate=_check,
    # 2: HTTP codings undone and charsets found as browsers do; every record a document or a
    # counted skip, numbered in its file; a budget of depth and time per record.
    version=2,
    resources=Resources(cpu=2),
    sharded=True,
    packages=("resiliparse", "fastwarc", "brotli", "zstandard"),
    code_modules=(
        "rules.webdata.extract",
        "rules.webdata.extract_worker",
        "rules.webdata.http_body",
        "rules.webdata.charsets",
        "rules.webdata.documents",
    ),
    metrics_file=SUMMARY,
    headline=_headline,
    doc=(
        "The main text of web pages (Resiliparse), a unit per WARC or HTML file. Output: train/ and "
        "validation/ shards of {'text', 'id', 'url', 'metadata'} lines, and summary.json (documents, "
        "skips by reason, each file's shard and counts)."
    ),
)
