"""Main text of web pages: WARC response records (or HTML files) to `Document`s.

The extractor is Resiliparse's `extract_plain_text` with its main-content heuristics, and
WARC files are read with FastWARC (which Resiliparse ships with). Both were chosen by
measurement on the generated corpus (`bench/extract.py`, docs/benchmarks.md): against
trafilatura, Resiliparse extracts the main text with the same token F1 (0.990 against
0.983) and returns nothing for a page of navigation alone (trafilatura: its chrome), at 33
times the pages per CPU second; FastWARC reads records 5 times as fast as warcio.

Each document keeps where it came from: its URL (`WARC-Target-URI`) and, as metadata,
the WARC record id (also the document's id), the WARC date and the HTTP content type.

A record that yields no document is a counted skip with a fixed reason, never an
exception: the WARC record is not an HTTP response, its status is not 2xx, it is not HTML,
it is larger than `max_payload_bytes` (not read), it is cut short, empty, not valid in its
charset, or has no main text (a page of navigation alone). A WARC file whose framing
breaks midway is counted as one `unreadable warc` skip, and its earlier records are kept.
"""

from __future__ import annotations

import codecs
import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fastwarc.warc import ArchiveIterator, WarcRecord, WarcRecordType
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLParserException

from rules.webdata.documents import Document, MetadataValue, Skips

HTML_TYPES = ("text/html", "application/xhtml+xml")
DEFAULT_CHARSET = "utf-8"  # what HTML5 assumes when neither the HTTP header nor a <meta> says
WARC_MAGIC = b"WARC/"  # how every WARC record begins


@dataclass(frozen=True)
class ExtractConfig:
    """How extraction treats pages; every field is part of a step's recipe."""

    max_payload_bytes: int = 10 * 2**20  # a larger page is skipped unread: no DOM of 100 MB in memory
    min_text_characters: int = 1  # a shorter main text counts as none

    def __post_init__(self) -> None:
        if self.max_payload_bytes < 1 or self.min_text_characters < 1:
            raise ValueError(
                "max_payload_bytes and min_text_characters must be positive, "
                f"got {self.max_payload_bytes} and {self.min_text_characters}"
            )


def main_text(html: str) -> str:
    """The main text of an HTML page: headings, paragraphs, lists and code blocks as lines.

    Navigation, headers, footers, sidebars, comments and post bylines are dropped (the
    flags that keep comments and post metadata are on by default in Resiliparse).
    """
    return extract_plain_text(html, main_content=True, preserve_formatting=True, comments=False, post_meta=False)


def _decoded(payload: bytes, charset: str | None) -> str | None:
    """The page as text in its declared charset (UTF-8 when none), or None if it is not."""
    try:
        return payload.decode(codecs.lookup(charset or DEFAULT_CHARSET).name)
    except (LookupError, UnicodeDecodeError):
        return None


def _document(
    html: str, config: ExtractConfig, document_id: str, url: str | None, metadata: dict[str, MetadataValue]
) -> Document | str:
    try:
        content = main_text(html).strip()
    except HTMLParserException:
        return "unparsable html"
    if len(content) < config.min_text_characters:
        return "no main text"
    return Document(text=content, id=document_id, url=url, metadata=metadata)


def _from_record(record: WarcRecord, where: str, config: ExtractConfig) -> Document | str:
    """The document of one WARC response record, or the reason it gives none.

    The size is checked first, from the headers, so a record too large is never read. A
    record is cut short when its WARC headers end before their Content-Length or its block
    before that length, wherever the cut fell: in its HTTP headers or in the page.
    """
    if record.headers.get("Content-Length") is None:
        return "truncated record"
    if record.content_length > config.max_payload_bytes:
        return "too large"
    payload = record.reader.read()
    if len(payload) < record.content_length:
        return "truncated record"
    if not record.is_http or record.http_headers is None or record.http_headers.status_code is None:
        return "not an http response"
    if not 200 <= record.http_headers.status_code < 300:
        return "http status not 2xx"
    content_type = (record.http_content_type or "").lower()
    if content_type not in HTML_TYPES:
        return "not html"
    if not payload.strip():
        return "empty payload"
    text = _decoded(payload, record.http_charset)
    if text is None:
        return "invalid text encoding"
    metadata: dict[str, MetadataValue] = {
        "warc_record_id": record.record_id,
        "warc_date": record.headers.get("WARC-Date"),
        "content_type": content_type,
    }
    return _document(text, config, record.record_id or where, record.headers.get("WARC-Target-URI"), metadata)


def is_warc(path: Path) -> bool:
    """Whether the file begins as a WARC file does, gzipped or not: with a record's version
    line (`WARC/1.0`). FastWARC reads anything else as a WARC file whose framing breaks at
    once; this tells a file that is no WARC at all (a wrong input) from one that breaks."""
    with open(path, "rb") as raw:
        head = raw.read(2)
    try:
        with gzip.open(path, "rb") if head == b"\x1f\x8b" else open(path, "rb") as stream:
            return stream.read(len(WARC_MAGIC)) == WARC_MAGIC
    except (OSError, EOFError, zlib.error):  # a gzip stream that is not one
        return False


def read_warc(
    path: Path, skips: Skips, config: ExtractConfig = ExtractConfig(), name: str | None = None
) -> Iterator[Document]:
    """The documents of the HTML response records of one WARC file (gzipped or not).

    Other record types (warcinfo, request, metadata) are passed over without a count:
    they are not pages. `skips` counts the response records that yield no document, where
    they are named after the file's `name` (default: its file name).
    """
    name = name or path.name
    with open(path, "rb") as stream:
        records = iter(ArchiveIterator(stream, record_types=WarcRecordType.response, parse_http=True))
        number = 0
        while True:
            try:
                record = next(records)
            except StopIteration:
                return
            except (OSError, ValueError):  # FastWARC's error for framing it cannot parse
                skips.add("unreadable warc", f"{name}:after record {number}")
                return
            number += 1
            where = f"{name}:record {number}"
            document = _from_record(record, where, config)
            if isinstance(document, str):
                skips.add(document, f"{where} ({record.headers.get('WARC-Target-URI')})")
            else:
                yield document


def read_html(
    path: Path, skips: Skips, config: ExtractConfig = ExtractConfig(), name: str | None = None
) -> Document | None:
    """The document of one HTML file (UTF-8), its id and source the file's `name` (default:
    its file name); None if skipped."""
    name = name or path.name
    if path.stat().st_size > config.max_payload_bytes:
        skips.add("too large", name)
        return None
    text = _decoded(path.read_bytes(), None)
    if text is None:
        document: Document | str = "invalid text encoding"
    else:
        document = _document(text, config, name, None, {"content_type": "text/html"})
    if isinstance(document, str):
        skips.add(document, name)
        return None
    return document
