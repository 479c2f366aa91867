"""Documents in JSONL shards: what is written is read back, and a bad line is a counted skip."""

from __future__ import annotations

import json

from rules.common.corpus import read_split
from rules.webdata.blocks.documents import Document, Skips, read_documents, write_documents

DOCUMENTS = [
    Document(text="first page", id="a", url="https://example.org/a", metadata={"warc_date": "2024-01-01T00:00:00Z"}),
    Document(text="second, with no url", id="b"),
    Document(text="third \u00e9t\u00e9 \u2014 not ascii", id="c", metadata={"score": 0.5, "kept": True, "n": 3}),
]


def test_documents_written_to_shards_are_read_back_as_they_were(tmp_path) -> None:
    writer = write_documents(tmp_path / "train", DOCUMENTS, shard_bytes=1)  # a shard per document
    assert (writer.documents, writer.shards) == (3, 3)
    skips = Skips()
    shards = sorted((tmp_path / "train").glob("shard-*.jsonl"))
    assert [doc for shard in shards for doc in read_documents(shard, skips)] == DOCUMENTS
    assert skips.total == 0
    # The text is first and alone where tokenize looks: the corpus reader sees the same documents.
    assert list(read_split(tmp_path, "train")) == [doc.text for doc in DOCUMENTS]


def test_a_line_without_an_id_is_named_by_its_shard_and_line(tmp_path) -> None:
    shard = tmp_path / "shard-00000.jsonl"
    shard.write_text('{"text": "from python_corpus"}\n\n{"text": "another"}\n')
    assert [doc.id for doc in read_documents(shard, Skips())] == ["shard-00000.jsonl:1", "shard-00000.jsonl:3"]


def test_bad_lines_are_skipped_and_counted_by_reason_with_the_first_place_met(tmp_path) -> None:
    shard = tmp_path / "shard-00000.jsonl"
    lines = [
        json.dumps({"text": "good", "id": "1"}).encode(),
        b"not json at all",
        b'["a list"]',
        b'{"id": "no text"}',
        b'{"text": 3}',
        b'{"text": "bad url", "url": 5}',
        b'{"text": "nested metadata", "metadata": {"a": {"b": 1}}}',
        b'{"text": "caf\xe9"}',
        b"{truncated",
        json.dumps({"text": "also good", "id": "2"}).encode(),
    ]
    shard.write_bytes(b"\n".join(lines) + b"\n")
    skips = Skips()
    assert [doc.id for doc in read_documents(shard, skips)] == ["1", "2"]
    assert skips.counts == {
        "not json": 2,
        "not an object": 1,
        "no string text": 2,
        "bad url or metadata": 2,
        "invalid utf-8": 1,
    }
    assert skips.first["not json"] == "shard-00000.jsonl:2"
    assert skips.to_json()["invalid utf-8"] == {"count": 1, "first": "shard-00000.jsonl:8"}
