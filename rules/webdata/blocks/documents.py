"""The document record of the web-data blocks, and its JSONL shards.

Every web-data block (extraction, filters, quality scoring, dedup)
takes and yields `Document`s, so blocks chain in any order and a rule is a loop over
them. On disk a document is one JSON object a line in the layout every data rule writes
(rules/common/corpus.py): `{"text": ...}` first, which is all `tokenize` reads, then `id`,
`url` and `metadata`, which the web-data rules keep so a researcher can trace a training
document back to the page it came from.

Bad input is counted, not raised: a line of a shard that is not JSON, not an object or
has no string `text` is skipped and counted in a `Skips` by reason, which `summary.json`
will hold. One bad line in a million is a fact to report, not a reason to lose the shard.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rules.common.corpus import SHARD_BYTES, ShardWriter

MetadataValue = str | int | float | bool | None


@dataclass(frozen=True)
class Document:
    """One document: its text, an id unique within its corpus, and where it came from.

    `metadata` holds JSON scalars only (the WARC date, record id, content type...), so a
    record always round-trips through a shard line unchanged.
    """

    text: str
    id: str
    url: str | None = None
    metadata: Mapping[str, MetadataValue] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        record: dict[str, object] = {"text": self.text, "id": self.id}
        if self.url is not None:
            record["url"] = self.url
        if self.metadata:
            record["metadata"] = dict(self.metadata)
        return record


class Skipped(Exception):
    """An input that gives no document, for a reason of `Skips`: raised where the reason is
    found (deep in decoding a record), caught where inputs are counted."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Skips:
    """Inputs a block passed over, counted by reason (`"not json"`, `"empty"`, ...).

    Reasons are short fixed phrases, never carrying the value that caused them, so the
    counts of a million documents stay a handful of lines; `first` keeps where each
    reason was first met, which is enough to go and look.
    """

    counts: Counter[str] = field(default_factory=Counter)
    first: dict[str, str] = field(default_factory=dict)

    def add(self, reason: str, where: str) -> None:
        self.counts[reason] += 1
        self.first.setdefault(reason, where)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def to_json(self) -> dict[str, dict[str, object]]:
        return {reason: {"count": self.counts[reason], "first": self.first[reason]} for reason in sorted(self.counts)}


def paragraphs(text: str) -> list[str]:
    """The paragraphs of a text, what lies between blank lines, stripped (the filters' and the
    paragraph dedup's unit: extraction separates blocks by blank lines)."""
    return [paragraph.strip() for paragraph in re.split(r"\n\s*\n", text) if paragraph.strip()]


def _document_from(line: bytes, default_id: str) -> Document | str:
    """The document a shard line holds, or the reason it holds none."""
    try:
        record = json.loads(line)
    except UnicodeDecodeError:
        return "invalid utf-8"
    except json.JSONDecodeError:
        return "not json"
    if not isinstance(record, dict):
        return "not an object"
    text = record.get("text")
    if not isinstance(text, str):
        return "no string text"
    url = record.get("url")
    metadata = record.get("metadata", {})
    if not isinstance(url, str | None) or not isinstance(metadata, dict):
        return "bad url or metadata"
    if not all(isinstance(value, MetadataValue) for value in metadata.values()):
        return "bad url or metadata"
    document_id = record.get("id", default_id)
    return Document(text=text, id=str(document_id), url=url, metadata=metadata)


def read_documents(shard: Path, skips: Skips) -> Iterator[Document]:
    """The documents of one JSONL shard, in order; bad lines are counted in `skips`.

    A line without an `id` (a shard of `text_files` or `python_corpus`) gets
    `SHARD:LINE`, so every document of any corpus has an id to be named by.
    """
    with open(shard, "rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{shard.name}:{number}"
            document = _document_from(line, where)
            if isinstance(document, str):
                skips.add(document, where)
            else:
                yield document


def write_documents(directory: Path, documents: Iterable[Document], shard_bytes: int = SHARD_BYTES) -> ShardWriter:
    """Write `documents` as shards into the new `directory`; the writer holds the counts."""
    writer = ShardWriter(directory, shard_bytes)
    try:
        for document in documents:
            writer.write(document.to_json())
    finally:
        writer.close()
    return writer
