"""The layout every data rule writes, and the reader of it for downstream rules.

A corpus is `train/` and `validation/` directories of JSONL shards (`shard-00000.jsonl`,
...), one `{"text": ...}` object a line, plus `summary.json` with the document counts.
The validation split is chosen by document position (never by chance), so the same
documents always give byte-identical shards and downstream steps can be cut off early.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any, TextIO

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.context import Context, StepFailed
from marinbuild.targets.shards import ShardResult

SPLITS = ("train", "validation")
# Why a corpus needs each split: what fails downstream when it has no document.
_NEEDED_FOR = {
    "train": "nothing is left to train on",
    "validation": "train_lm and eval_lm evaluate on the validation split (a larger validation_fraction where "
    "the corpus is split holds out more)",
}
SUMMARY = "summary.json"
SHARD_BYTES = 64 * 2**20  # a new shard starts once a shard holds this many bytes
PROGRESS_EVERY = 1000  # documents between progress reports

# Attributes every data rule shares.
CORPUS_ATTRS: dict[str, Attr] = {
    "sample_count": Attr(types.INT, default=None, doc="Keep only the first N documents (quick runs)."),
    "validation_fraction": Attr(
        types.FLOAT, default=0.01, doc="Share of documents, evenly spaced, held out for validation."
    ),
}


def check_corpus_attrs(attrs: Mapping[str, JsonValue]) -> None:
    """Load-time checks of CORPUS_ATTRS (a ValueError names the BUILD line)."""
    if attrs["sample_count"] is not None and attrs["sample_count"] < 2:
        raise ValueError(
            f"sample_count must be at least 2 (one train and one validation document), got {attrs['sample_count']}"
        )
    if not 0 < attrs["validation_fraction"] < 1:
        raise ValueError(f"validation_fraction must be between 0 and 1 (exclusive), got {attrs['validation_fraction']}")


class ShardWriter:
    """Writes one split's records, a JSON object a line, into numbered shards of about
    `shard_bytes` each (`shard-00000.jsonl`, ...): the one writer of every data rule."""

    def __init__(self, directory: Path, shard_bytes: int = SHARD_BYTES):
        self.directory = directory
        self.shard_bytes = shard_bytes
        directory.mkdir(parents=True)
        self.documents = 0
        self.shards = 0
        self._file: TextIO | None = None
        self._bytes = 0

    def write(self, record: Mapping[str, Any]) -> None:
        if self._file is None or self._bytes >= self.shard_bytes:
            self.close()
            self._file = open(self.directory / f"shard-{self.shards:05d}.jsonl", "w", encoding="utf-8")
            self.shards += 1
            self._bytes = 0
        line = json.dumps(record, ensure_ascii=False) + "\n"
        self._file.write(line)
        self._bytes += len(line.encode())
        self.documents += 1

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def write_corpus(
    out: Path,
    documents: Iterable[Any],
    *,
    sample_count: int | None,
    validation_fraction: float,
    progress: Callable[[float, float | None, str], None],
    source: Mapping[str, Any],
    field: str = "text",
) -> dict[str, Any]:
    """Write `documents` (empty ones dropped) as train/validation shards and summary.json,
    each a line `{field: document}`: a text, or a chat's messages (chat_data).

    Document i goes to validation when ceil((i + 1) * f) > ceil(i * f): the first
    document and then one in every 1/f, so even a tiny sample has a validation split.
    `source` describes where the documents came from and goes into the summary, so the
    output (and every key downstream) changes when the source does. The summary holds no
    attribute that does not change the documents: a larger sample_count than there are
    documents gives the same bytes, and downstream steps are cut off early.
    """
    fraction = Fraction(repr(validation_fraction))
    writers = {split: ShardWriter(out / split) for split in SPLITS}
    count = empty = 0
    try:
        for text in documents:
            if not text:
                empty += 1
                continue
            if sample_count is not None and count >= sample_count:
                break
            held_out = math.ceil((count + 1) * fraction) > math.ceil(count * fraction)
            writers["validation" if held_out else "train"].write({field: text})
            count += 1
            if count % PROGRESS_EVERY == 0:
                progress(count, sample_count, "docs")
    finally:
        for writer in writers.values():
            writer.close()
    if writers["train"].documents == 0:
        dropped = f" ({empty:,} empty ones dropped)" if empty else ""
        raise StepFailed(f"only {count} non-empty document(s){dropped}: too few for a train and a validation split")
    progress(count, count, "docs")
    summary = {
        "documents": {split: writer.documents for split, writer in writers.items()},
        "shards": {split: writer.shards for split, writer in writers.items()},
        "source": dict(source),
    }
    (out / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def corpus_from(ctx: Context, documents: Iterable[Any], source: Mapping[str, Any], field: str = "text") -> None:
    """`write_corpus` of a step whose attributes hold CORPUS_ATTRS, into its output."""
    write_corpus(
        ctx.out,
        documents,
        sample_count=ctx.attrs["sample_count"],
        validation_fraction=ctx.attrs["validation_fraction"],
        progress=ctx.progress,
        source=source,
        field=field,
    )


def corpus_root(files: Iterable[Path]) -> Path:
    """The directory holding summary.json among an input's files (a data rule's output)."""
    for path in files:
        if path.name == SUMMARY and (path.parent / "train").is_dir():
            return path.parent
    raise StepFailed("the data input is not a corpus: expected summary.json next to train/ (the output of a data rule)")


def json_lines(lines: Iterable[str | bytes], name: str) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSON lines file the user gave, a line
    that is not JSON a step failure naming `name:LINE` (a corpus of ours is read by `read_split`)."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as error:
            raise StepFailed(f"{name}:{number}: not a JSON line: {error}") from None


def read_summary(root: Path) -> dict[str, Any]:
    return json.loads((root / SUMMARY).read_text())


def read_split(root: Path, split: str) -> Iterator[str]:
    """Every document of one split, in shard order."""
    for shard in sorted((root / split).glob("shard-*.jsonl")):
        with open(shard, encoding="utf-8") as lines:
            for line in lines:
                yield json.loads(line)["text"]


def split_counts(results: Iterable[ShardResult], count: Callable[[ShardResult], int]) -> dict[str, int]:
    """`count` of each unit of a sharded data step, added up by split (a unit is named
    `split/shard-...`): the documents each split's units read, for `check_not_emptied`."""
    totals = dict.fromkeys(SPLITS, 0)
    for result in results:
        totals[Path(result.name).parent.name] += count(result)
    return totals


def check_not_emptied(
    seen: Mapping[str, int], kept: Mapping[str, int], removed: str, why: Callable[[], str] = lambda: ""
) -> None:
    """The end of a data step's driver (filter_text, score_quality, dedup): a split of which
    the step read documents and kept none fails the step, in one line saying what removed
    them (`removed`, the subject and verb of a sentence, "the threshold 0.9 rejected"; `why()`
    what the step counted, "scores 0.63-0.83", asked for only then: it may read much).
    An empty corpus published goes on silently into tokenize and fails much later inside
    Levanter; a split already empty in the input is not this step's doing, and the first
    step that needs it (tokenize) says so."""
    emptied = [split for split in SPLITS if seen.get(split, 0) and not kept.get(split, 0)]
    if not emptied:
        return
    detail = f" ({reason})" if (reason := why()) else ""
    if len(emptied) == len(SPLITS):
        raise StepFailed(f"{removed} all {sum(seen.values()):,} documents{detail}")
    [split] = emptied
    raise StepFailed(f"{removed} all {seen[split]:,} {split} documents{detail}: {_NEEDED_FOR[split]}")


def check_has_documents(documents: Mapping[str, int], label: str) -> None:
    """At the start of a step that needs both splits of its corpus `label` (tokenize, whose
    caches train_lm trains and evaluates on): a split without a document fails it there,
    before Levanter fails on it with an IndexError."""
    for split in SPLITS:
        if not documents.get(split, 0):
            raise StepFailed(f"the data {label} holds no {split} document: {_NEEDED_FOR[split]}")
