"""Extraction from WARC files and HTML: documents keep where they came from, and every record
that gives no document is a counted skip with its reason (checked against the generated
corpus's ground truth). The shapes other tools write: tests/rules/webdata/test_real_warcs.py.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from rules.webdata.blocks.documents import Skips
from rules.webdata.blocks.extract import ExtractConfig, main_text, read_html, read_warc
from rules.webdata.blocks.raw_corpus.pages import RawCorpus, RawCorpusSpec
from rules.webdata.blocks.raw_corpus.pool import Pool
from rules.webdata.blocks.raw_corpus.warc import GROUND_TRUTH, WARC_DIRECTORY, response_record, write_raw_corpus

SPEC = RawCorpusSpec(seed=3, pages=160, pages_per_file=80, malformed_rate=0.15, boilerplate_rate=0.05, stdlib_modules=2)

DEFAULT = ExtractConfig()

# What the extractor says of each kind of bad page the generator injects.
REASONS = {
    "invalid_utf8": "invalid text encoding",
    "empty_payload": "empty payload",
    "not_http": "not an http response",
    "binary_payload": "not html",
    "truncated": "truncated record",
}


@pytest.fixture(scope="module")
def corpus() -> RawCorpus:
    return RawCorpus(SPEC, Pool.load(SPEC.stdlib_modules))


@pytest.fixture(scope="module")
def written(tmp_path_factory, corpus) -> Path:
    out = tmp_path_factory.mktemp("extract") / "raw"
    write_raw_corpus(SPEC, out, corpus)
    return out


def _extract(out: Path, config: ExtractConfig = DEFAULT) -> tuple[list, Skips]:
    skips = Skips()
    documents = [doc for path in sorted((out / WARC_DIRECTORY).iterdir()) for doc in read_warc(path, skips, config)]
    return documents, skips


def _truth(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / GROUND_TRUTH).read_text().splitlines()]


def test_each_document_keeps_its_url_and_warc_metadata(written, corpus) -> None:
    documents, _ = _extract(written)
    truth = {entry["record_id"]: entry for entry in _truth(written)}
    assert documents
    for document in documents:
        entry = truth[document.id]
        page = corpus.page(entry["page"])
        assert document.url == entry["url"] == page.url
        assert document.metadata == {
            "warc_record_id": page.record_id,
            "warc_date": page.date,
            "content_type": "text/html",
        }


def test_every_bad_record_is_a_skip_counted_by_its_reason(written) -> None:
    documents, skips = _extract(written)
    truth = _truth(written)
    expected = Counter(REASONS[entry["detail"]] for entry in truth if entry["kind"] == "malformed")
    expected["no main text"] = sum(entry["kind"] == "boilerplate" for entry in truth)
    # Records of other types, by type: a warcinfo record a file, a request before each response.
    expected["warcinfo record"] = len(list((written / WARC_DIRECTORY).iterdir()))
    expected["request record"] = sum(entry["detail"] != "truncated" for entry in truth)
    assert skips.counts == expected
    records = len(truth) + expected["warcinfo record"] + expected["request record"]
    assert len(documents) + skips.total == records  # each record: a document or a skip
    kept = {document.id for document in documents}
    assert kept == {entry["record_id"] for entry in truth if entry["kind"] not in ("malformed", "boilerplate")}
    assert skips.first["truncated record"].startswith("part-00001.warc.gz:record ")


@pytest.mark.parametrize("cut_at", [b"WARC-Date", b"Content-Type: text/html", b"<main", b"</html>"])
def test_a_record_cut_short_is_a_truncated_record_wherever_the_cut_falls(tmp_path, corpus, cut_at) -> None:
    """Uncompressed, so the cut leaves the reader every byte before it (a cut gzip member
    leaves it next to nothing: zlib writes a record of a few kB as one deflate block)."""
    page = next(p for p in corpus.pages() if p.kind == "original")
    whole = io.BytesIO()
    writer = WARCWriter(whole, gzip=False)
    writer.write_record(response_record(writer, page))
    data = whole.getvalue()
    (tmp_path / "cut.warc").write_bytes(data[: data.index(cut_at)])
    skips = Skips()
    assert list(read_warc(tmp_path / "cut.warc", skips)) == []
    assert skips.counts == {"truncated record": 1}


def test_a_response_other_than_2xx_is_skipped_by_its_status(tmp_path) -> None:
    stream = io.BytesIO()
    writer = WARCWriter(stream, gzip=True)
    for status in ("404 Not Found", "301 Moved Permanently", "200 OK"):
        http = StatusAndHeaders(status, [("Content-Type", "text/html")], protocol="HTTP/1.1")
        body = io.BytesIO(b"<html><body><main><p>A page that says something of its own.</p></main></body></html>")
        writer.write_record(
            writer.create_warc_record("https://example.org/", "response", payload=body, http_headers=http)
        )
    (tmp_path / "statuses.warc.gz").write_bytes(stream.getvalue())
    skips = Skips()
    documents = list(read_warc(tmp_path / "statuses.warc.gz", skips))
    assert [d.text for d in documents] == ["A page that says something of its own."]
    assert skips.counts == {"http status not 2xx": 2}


def test_a_page_over_the_size_limit_is_skipped_unread(written, corpus) -> None:
    limit = 4000
    documents, skips = _extract(written, ExtractConfig(max_payload_bytes=limit))
    truth = _truth(written)
    too_large = {entry["record_id"] for entry in truth if len(corpus.page(entry["page"]).payload) > limit}
    assert too_large and skips.counts["too large"] == len(too_large)
    assert documents and too_large.isdisjoint(document.id for document in documents)


def test_the_main_text_is_kept_and_the_chrome_dropped(corpus) -> None:
    originals = [p for p in corpus.pages() if p.kind == "original"]
    for page in originals:
        text = main_text(page.payload.decode())
        for block in page.main_text.split("\n\n"):
            assert " ".join(block.split()[:8]) in " ".join(text.split()), (page.url, block[:80])
        # Bylines are not checked: those of the wiki and docs layouts ("From CodeWiki, edited
        # ...", "Last updated on ...") are kept, as the benchmark measures.
        leaked = [phrase for phrase in page.boilerplate if len(phrase.split()) >= 4 and phrase in text]
        assert not leaked, (page.url, leaked)


def test_a_warc_file_broken_midway_keeps_its_earlier_records_and_counts_one_skip(written, tmp_path) -> None:
    first = sorted((written / WARC_DIRECTORY).iterdir())[0]
    good = first.read_bytes()
    broken = tmp_path / "broken.warc.gz"
    broken.write_bytes(good + b"these bytes are no gzip member\r\n\r\n" + good)
    skips = Skips()
    documents = list(read_warc(broken, skips))
    whole = Skips()
    assert [d.id for d in documents] == [d.id for d in read_warc(first, whole)]
    assert skips.counts == whole.counts + Counter({"unreadable warc": 1})


def test_html_files_give_a_document_or_a_counted_skip(tmp_path, corpus) -> None:
    page = next(p for p in corpus.pages() if p.kind == "original")
    (tmp_path / "page.html").write_bytes(page.payload)
    (tmp_path / "latin1.html").write_bytes("<html><body><p>Caf\xe9 cr\xe8me</p></body></html>".encode("latin-1"))
    (tmp_path / "nav.html").write_bytes(b"<html><body><nav><a href='/'>Home</a></nav></body></html>")
    (tmp_path / "empty.html").write_bytes(b"")
    skips = Skips()
    document = read_html(tmp_path / "page.html", skips)
    assert document is not None and document.id == "page.html" and document.url is None
    assert page.main_text.split("\n\n")[1][:60] in document.text
    assert [read_html(tmp_path / name, skips) for name in ("nav.html", "empty.html")] == [None] * 2
    assert read_html(tmp_path / "page.html", skips, ExtractConfig(max_payload_bytes=100)) is None
    assert skips.counts == {"no main text": 2, "too large": 1}
    latin1 = read_html(tmp_path / "latin1.html", skips)  # no charset declared: the one detected
    assert latin1 is not None and latin1.text == "Caf\xe9 cr\xe8me"


def test_a_bad_config_is_refused() -> None:
    for field in ("max_payload_bytes", "min_text_characters", "max_nesting_depth", "max_record_seconds"):
        with pytest.raises(ValueError, match=rf"^{field} must be positive( and at most [\d,]+)?, got 0$"):
            ExtractConfig(**{field: 0})
    with pytest.raises(
        ValueError, match="^max_record_seconds must be positive and at most 86,400, got 1000000000000.0$"
    ):
        ExtractConfig(max_record_seconds=1e12)  # a timer cannot be set so far
