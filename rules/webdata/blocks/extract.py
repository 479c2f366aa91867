"""Main text of web pages: WARC records (or HTML files) to `Document`s.

The extractor is Resiliparse's `extract_plain_text` with its main-content heuristics, and
WARC files are read with FastWARC (which Resiliparse ships with). Both were chosen by
measurement on the generated corpus (`bench/extract.py`, docs/benchmarks.md): against
trafilatura, Resiliparse extracts the main text with the same token F1 (0.990 against
0.983) and returns nothing for a page of navigation alone (trafilatura: its chrome), at 33
times the pages per CPU second; FastWARC reads records 5 times as fast as warcio.

A page is read as a browser reads it, whatever tool wrote the WARC file: the HTTP body's
transfer and content codings undone (`http_body`), its charset found as the HTML standard
finds it (`charsets`). Each document keeps where it came from: its URL
(`WARC-Target-URI`) and, as metadata, the WARC record id (also the document's id), the
WARC date and the HTTP content type.

Every record is a document or a skip counted by a fixed reason, never an exception: a
record of another type than response (request, revisit, metadata, resource, warcinfo) by
its type; a response that is not HTTP, not 2xx, not HTML, larger than `max_payload_bytes`
(stored or decoded), cut short, empty, in a coding or charset that cannot be undone, nested
deeper than `max_nesting_depth`, or without main text (a page of navigation alone). A WARC
file whose framing breaks midway is counted as one `unreadable warc` skip, and its earlier
records are kept. The time a record may take is bounded where records are extracted for a
step (`extract_worker`), in a process that can be stopped in the middle of C code.
"""

from __future__ import annotations

import functools
import gzip
import re
import zlib
from collections.abc import Callable, Iterator, Set
from dataclasses import asdict, dataclass
from itertools import accumulate
from pathlib import Path

from fastwarc.warc import ArchiveIterator, WarcRecord, WarcRecordType
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLParserException, HTMLTree

from rules.webdata.blocks.charsets import content_type, page_text
from rules.webdata.blocks.documents import Document, MetadataValue, Skipped, Skips
from rules.webdata.blocks.http_body import http_body

HTML_TYPES = ("text/html", "application/xhtml+xml")
WARC_MAGIC = b"WARC/"  # how every WARC record begins
OVER_BUDGET = "over time budget"  # the skip of a record whose extraction ran out of time

_VOID_ELEMENTS = "area|base|br|col|embed|hr|img|input|keygen|link|meta|param|source|track|wbr"
# A start tag ("") or an end tag ("/") of an element that may hold others. Void elements in
# lower or upper case; one in mixed case counts as a start tag: a scan that overestimates costs
# the exact search, never a page (a search without case is twice as slow).
_TAG_EDGE = re.compile(rf"<(/?)(?!(?:{_VOID_ELEMENTS}|{_VOID_ELEMENTS.upper()})[\t\n\x0c\r />])[a-zA-Z]")
_NESTING = {"": 1, "/": -1}  # what a start tag and an end tag do to the depth
_DEPTH_FACTOR = 4  # how much deeper than its tags the parser may nest a page (see `checked`)

# Past these a budget bounds nothing (100,000 nested <div>s take minutes; a day is no budget
# for a page), and a timer cannot be set past them.
_MOST = {"max_nesting_depth": 100_000, "max_record_seconds": 86_400}

# A record's outcome: where it is (`FILE:record N (URL)`) and its document or skip reason.
Outcome = tuple[str, Document | str]
# How a record's document is made: the call that makes it, through what bounds its time.
Within = Callable[[Callable[[], Document]], Document]


@dataclass(frozen=True)
class ExtractConfig:
    """How extraction treats pages; every field is part of a step's recipe."""

    max_payload_bytes: int = 10 * 2**20  # a larger page (stored or decoded) is skipped: no DOM of 100 MB in memory
    min_text_characters: int = 1  # a shorter main text counts as none
    # Where browsers' HTML parsers stop nesting elements (Blink's and WebKit's: 512). The
    # main-text heuristics take time in the page's nodes times its depth: a page of 100,000
    # nested <div>s (1.1 MB) took 190 s.
    max_nesting_depth: int = 512
    max_record_seconds: float = 5.0  # CPU seconds one record may take, read to extracted (extract_worker)

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            most = _MOST.get(name)
            if not value > 0 or (most is not None and value > most):
                raise ValueError(f"{name} must be positive{f' and at most {most:,}' if most else ''}, got {value}")


def main_text(html: str | HTMLTree) -> str:
    """The main text of an HTML page: headings, paragraphs, lists and code blocks as lines.

    Navigation, headers, footers, sidebars, comments and post bylines are dropped (the
    flags that keep comments and post metadata are on by default in Resiliparse).
    """
    return extract_plain_text(html, main_content=True, preserve_formatting=True, comments=False, post_meta=False)


def tags_bound(html: str) -> int:
    """At least `markup_depth(html)`, in the time of two counts of a string: the range of a
    running sum is at most its rises or its falls, and a start tag begins with a '<' that
    begins no '</'."""
    ends = html.count("</")
    return max(html.count("<") - ends, ends)


def markup_depth(html: str) -> int:
    """How deep the page's tags nest as written, at most: the range of the running count of
    start tags less end tags, void elements (<br>, <img>...) left out. The range, not the
    highest count, so that end tags with no start tag before them hide no nesting after
    them. A scan in C: a regular expression, then a running sum."""
    counts = list(accumulate(map(_NESTING.__getitem__, _TAG_EDGE.findall(html)), initial=0))
    return max(counts) - min(counts)


@functools.cache
def _selector(depth: int) -> str:
    """A CSS selector that matches an element with `depth` elements above it."""
    return " > ".join(["*"] * (depth + 1))


def checked(html: str, max_depth: int) -> str | HTMLTree:
    """The page to extract the main text of, Skipped when the parser nests its elements
    deeper than `max_depth`.

    Most pages are passed as they are, since their tags nest within a quarter of the depth:
    the elements the parser adds around a tag (a <td> outside a row gets a <tbody> and a
    <tr>) or reconstructs (formatting left open) do not take a page of such markup past it.
    A page of few tags is known to by two counts (`tags_bound`), others by the scan of their
    tags (`markup_depth`). A page whose tags nest deeper is parsed, and its tree searched
    for an element deeper than `max_depth` by Lexbor's selector engine, in C (a page that
    reaches the depth only by misnesting its tags is bounded by the time a record may
    take). On a page of 4 kB and 130 tags, the counts cost about 6 us, the scan 23 us and
    the search, after the parse the extraction makes anyway, 75 us: measured against the
    100 us of the extraction itself."""
    if _DEPTH_FACTOR * tags_bound(html) <= max_depth or _DEPTH_FACTOR * markup_depth(html) <= max_depth:
        return html
    try:
        tree = HTMLTree.parse(html)
    except HTMLParserException:
        raise Skipped("unparsable html") from None
    if tree.document is not None and tree.document.query_selector(_selector(max_depth)) is not None:
        raise Skipped("too deeply nested")
    return tree


def _document(
    html: str, config: ExtractConfig, document_id: str, url: str | None, metadata: dict[str, MetadataValue]
) -> Document:
    try:
        content = main_text(checked(html, config.max_nesting_depth)).strip()
    except HTMLParserException:
        raise Skipped("unparsable html") from None
    if len(content) < config.min_text_characters:
        raise Skipped("no main text")
    return Document(text=content, id=document_id, url=url, metadata=metadata)


def _header(record: WarcRecord, name: str) -> str | None:
    """An HTTP header of the record, its occurrences joined by commas (None if absent)."""
    values = record.http_headers.get_multiple(name)
    return ", ".join(values) if values else None


def target_uri(record: WarcRecord) -> str | None:
    """The record's `WARC-Target-URI`, without the angle brackets wget writes around it."""
    uri = record.headers.get("WARC-Target-URI")
    return uri[1:-1] if uri and uri.startswith("<") and uri.endswith(">") else uri


def _from_record(record: WarcRecord, where: str, config: ExtractConfig) -> Document:
    """The document of one WARC record; Skipped with the reason it gives none.

    The size is checked first, from the headers, so a record too large is never read. A
    record is cut short when its WARC headers end before their Content-Length or its block
    before that length, wherever the cut fell: in its HTTP headers or in the page.
    """
    if record.record_type != WarcRecordType.response:
        raise Skipped(f"{record.record_type} record")
    if record.is_http:  # by its WARC Content-Type (application/http); a dns: record is no HTTP
        record.parse_http()
    if record.headers.get("Content-Length") is None:
        raise Skipped("truncated record")
    if record.content_length > config.max_payload_bytes:
        raise Skipped("too large")
    payload = record.reader.read()
    if len(payload) < record.content_length:
        raise Skipped("truncated record")
    if not record.is_http or record.http_headers is None or record.http_headers.status_code is None:
        raise Skipped("not an http response")
    if not 200 <= record.http_headers.status_code < 300:
        raise Skipped("http status not 2xx")
    mime, charset = content_type(_header(record, "Content-Type") or "")
    if mime not in HTML_TYPES:
        raise Skipped("not html")
    body = http_body(
        payload, _header(record, "Transfer-Encoding"), _header(record, "Content-Encoding"), config.max_payload_bytes
    )
    if not body.strip():
        raise Skipped("empty payload")
    metadata: dict[str, MetadataValue] = {
        "warc_record_id": record.record_id,
        "warc_date": record.headers.get("WARC-Date"),
        "content_type": mime,
    }
    return _document(page_text(body, charset), config, record.record_id or where, target_uri(record), metadata)


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


def _directly(extract: Callable[[], Document]) -> Document:
    """No bound but the record's size and depth: reading in this process (tests, benchmarks)."""
    return extract()


def warc_outcomes(
    path: Path,
    name: str,
    config: ExtractConfig,
    first: int = 1,
    over_budget: Set[int] = frozenset(),
    within: Within = _directly,
) -> Iterator[Outcome]:
    """The outcome of each record of one WARC file (gzipped or not), numbered from 1 in
    the file, and last, if its framing breaks, an `unreadable warc` skip.

    Each record's document is made through `within` (which bounds its time, in
    `extract_worker`). Records before `first` are passed over unread and give no outcome;
    those numbered in `over_budget` give that skip unread (a process that resumes a file
    after a record that ran out of time)."""
    with open(path, "rb") as stream:
        records = iter(ArchiveIterator(stream, parse_http=False))  # parsed for responses alone, in _from_record
        number = 0
        while True:
            try:
                record = next(records)
            except StopIteration:
                return
            except (OSError, ValueError):  # FastWARC's error for framing it cannot parse
                yield f"{name}:after record {number}", "unreadable warc"
                return
            number += 1
            if number < first:
                continue
            where = f"{name}:record {number}"
            try:
                if number in over_budget:
                    raise Skipped(OVER_BUDGET)
                yield where, within(functools.partial(_from_record, record, where, config))
            except Skipped as skipped:
                uri = target_uri(record)
                yield (f"{where} ({uri})" if uri else where), skipped.reason


def html_outcome(path: Path, name: str, config: ExtractConfig, within: Within = _directly) -> Outcome:
    """The outcome of one HTML file, its id and source the file's `name`. Its charset is
    found as a browser finds a local file's: a byte-order mark, its `<meta>`, a guess."""
    if path.stat().st_size > config.max_payload_bytes:
        return name, "too large"
    try:
        return name, within(functools.partial(_html_document, path, name, config))
    except Skipped as skipped:
        return name, skipped.reason


def _html_document(path: Path, name: str, config: ExtractConfig) -> Document:
    return _document(page_text(path.read_bytes(), None), config, name, None, {"content_type": "text/html"})


def read_warc(
    path: Path, skips: Skips, config: ExtractConfig = ExtractConfig(), name: str | None = None
) -> Iterator[Document]:
    """The documents of the HTML response records of one WARC file (gzipped or not);
    `skips` counts every other record, named after the file's `name` (default: its file name)."""
    for where, outcome in warc_outcomes(path, name or path.name, config):
        if isinstance(outcome, str):
            skips.add(outcome, where)
        else:
            yield outcome


def read_html(
    path: Path, skips: Skips, config: ExtractConfig = ExtractConfig(), name: str | None = None
) -> Document | None:
    """The document of one HTML file, its id and source the file's `name` (default: its
    file name); None if skipped."""
    where, outcome = html_outcome(path, name or path.name, config)
    if isinstance(outcome, str):
        skips.add(outcome, where)
        return None
    return outcome
