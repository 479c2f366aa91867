"""`extract_text`'s step: the main text of web pages (WARC files or HTML files), file by file.

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
from marinbuild.targets import ShardResult, ShardUnit
from marinbuild.targets.attrs import JsonValue
from marinbuild.targets.context import Context, StepFailed
from rules.common.corpus import SPLITS, SUMMARY
from rules.webdata.blocks.documents import Document
from rules.webdata.constants import FORMATS

_COUNTS = "counts.json"  # a unit's counts, beside its {split}.jsonl
_KEY_CHARACTERS = 16  # of a unit's key, in its shards' names
# The attributes that make an `extract.ExtractConfig`.
CONFIG = ("max_payload_bytes", "min_text_characters", "max_nesting_depth", "max_record_seconds")


def held_out(document_id: str, fraction: float) -> bool:
    """Whether the document of this id is in the validation split: a function of the id alone."""
    return int(digest_bytes(document_id.encode())[:16], 16) < fraction * 2**64


def extract_config(attrs: Mapping[str, JsonValue]) -> Any:
    """The extraction's settings; `extract` (Resiliparse, FastWARC) is imported here, when a
    BUILD file declares such a target or a unit runs."""
    from rules.webdata.blocks.extract import ExtractConfig

    return ExtractConfig(**{name: attrs[name] for name in CONFIG if attrs[name] is not None})


# -- a unit: one file -------------------------------------------------------------------------


def extract_file(ctx: Context) -> None:
    """One unit: the documents of one file, by split, and its skips."""
    from rules.webdata.blocks.extract import is_warc

    path, name, fmt = ctx.location("file"), ctx.attrs["name"], ctx.attrs["format"]
    if fmt == "warc" and not is_warc(path):
        raise StepFailed(f"{name} is not a WARC file: it does not begin with a WARC record ('WARC/1.0' ...)")
    counts = extract_into(
        ctx.out,
        path,
        fmt,
        name,
        extract_config(ctx.attrs),
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
    from rules.webdata.blocks.extract_worker import budgeted_extraction

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


def extract_text(ctx: Context) -> None:
    """The driver: a unit per input file, then the corpus from their outputs."""
    fmt = ctx.attrs["format"]
    config = extract_config(ctx.attrs)  # defaults included: what each unit's key holds
    parameters = {
        "format": fmt,
        "validation_fraction": ctx.attrs["validation_fraction"],
        **{name: getattr(config, name) for name in CONFIG},
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
