"""The WARC files of a raw corpus (written with `warcio`, gzip per record, as Common Crawl
ships them) and its ground truth: each page's kind and, for copies, the original's URL
and record id, from which dedup precision and recall are computed."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

from warcio.recordloader import ArcWarcRecord
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from rules.common.stdlib import RUNNING_PYTHON
from rules.webdata.blocks.raw_corpus.pages import KINDS, TRUNCATED, Page, RawCorpus, RawCorpusSpec
from rules.webdata.blocks.raw_corpus.sites import EPOCH

GROUND_TRUTH = "ground_truth.jsonl"
WARC_DIRECTORY = "warc"
# Who wrote the files, in each one's warcinfo record (part of their bytes: keep it as it is).
_SOFTWARE = "marinbuild rules.webdata.raw_corpus"


@dataclass(frozen=True)
class WrittenCorpus:
    """What `write_raw_corpus` wrote: the WARC files and the count of pages by kind."""

    files: tuple[str, ...]
    kinds: dict[str, int]
    bytes: int

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def _warc_headers(record_type: str, page: Page, record_id: str, **extra: str) -> StatusAndHeaders:
    fields = {
        "WARC-Type": record_type,
        "WARC-Target-URI": page.url,
        "WARC-Date": page.date,
        "WARC-Record-ID": record_id,
    }
    return StatusAndHeaders("", list({**fields, **extra}.items()), protocol="WARC/1.0")


def response_record(writer: WARCWriter, page: Page) -> ArcWarcRecord:
    """The WARC response record of `page`: an HTTP response around its payload.

    A `not_http` page's block is its payload alone, with no HTTP status line and headers.
    """
    headers = _warc_headers("response", page, page.record_id, **{"Content-Type": "application/http; msgtype=response"})
    if page.content_type == "not_http":
        return ArcWarcRecord("warc", "response", headers, io.BytesIO(page.payload), None, "", len(page.payload))
    http = StatusAndHeaders(
        "200 OK",
        [("Content-Type", page.content_type), ("Content-Length", str(len(page.payload))), ("Server", "nginx")],
        protocol="HTTP/1.1",
    )
    return writer.create_warc_record(
        page.url, "response", payload=io.BytesIO(page.payload), http_headers=http, warc_headers=headers
    )


def _request(writer: WARCWriter, page: Page) -> ArcWarcRecord:
    """The WARC request record before `page`'s response, as a crawler writes it."""
    _, _, host, path = page.url.split("/", 3)
    http = StatusAndHeaders(f"GET /{path} HTTP/1.1", [("Host", host), ("User-Agent", "marinbuild-testcrawler/1.0")])
    record_id = f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, page.record_id)}>"
    headers = _warc_headers("request", page, record_id, **{"WARC-Concurrent-To": page.record_id})
    return writer.create_warc_record(page.url, "request", http_headers=http, warc_headers=headers)


def _warcinfo(writer: WARCWriter, name: str, spec: RawCorpusSpec) -> ArcWarcRecord:
    fields = {"software": _SOFTWARE, "python": RUNNING_PYTHON, "seed": spec.seed}
    info = "".join(f"{key}: {value}\r\n" for key, value in fields.items()).encode()
    headers = StatusAndHeaders(
        "",
        [
            ("WARC-Type", "warcinfo"),
            ("WARC-Record-ID", f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'{spec.seed}/{name}')}>"),
            ("WARC-Filename", name),
            ("WARC-Date", f"{EPOCH:%Y-%m-%dT%H:%M:%SZ}"),
        ],
        protocol="WARC/1.0",
    )
    return writer.create_warc_record("", "warcinfo", payload=io.BytesIO(info), length=len(info), warc_headers=headers)


def write_raw_corpus(
    spec: RawCorpusSpec,
    out: Path,
    corpus: RawCorpus | None = None,
    progress: Callable[[int], None] = lambda pages: None,
) -> WrittenCorpus:
    """Write the WARC files of `spec` under `out/warc/` and `out/ground_truth.jsonl`.

    Files hold `pages_per_file` pages each (`part-00000.warc.gz`, ...), each page a
    request and a response record after the file's warcinfo record. Memory is one page.
    `progress` is told the pages written, after each file.
    """
    corpus = corpus or RawCorpus(spec)
    directory = out / WARC_DIRECTORY
    directory.mkdir(parents=True)
    kinds = dict.fromkeys(KINDS, 0)
    files: list[str] = []
    with open(out / GROUND_TRUTH, "w", encoding="utf-8") as truth:
        for first in range(0, spec.pages, spec.pages_per_file):
            name = f"part-{len(files):05d}.warc.gz"
            files.append(name)
            last = min(first + spec.pages_per_file, spec.pages)
            with open(directory / name, "wb") as warc:
                writer = WARCWriter(warc, gzip=True)
                writer.write_record(_warcinfo(writer, name, spec))
                for index in range(first, last):
                    page = corpus.page(index)
                    writer.write_record(_request(writer, page))
                    writer.write_record(response_record(writer, page))
                    kinds[page.kind] += 1
                    truth.write(json.dumps(_truth(page, name, corpus)) + "\n")
                if spec.truncate_last_record and last == spec.pages:
                    _write_truncated(writer, warc, corpus, name, truth)
                    kinds["malformed"] += 1
            progress(last)
    size = sum((directory / name).stat().st_size for name in files)
    return WrittenCorpus(files=tuple(files), kinds=kinds, bytes=size)


def _truth(page: Page, file: str, corpus: RawCorpus) -> dict[str, object]:
    original = corpus.page(page.copy_of) if page.copy_of is not None else None
    return {
        "page": page.index,
        "file": file,
        "url": page.url,
        "record_id": page.record_id,
        "kind": page.kind,
        "detail": page.detail,
        "copy_of": original.url if original else None,
        "copy_of_record": original.record_id if original else None,
        "edits": page.edits,
    }


def _write_truncated(writer: WARCWriter, warc: BinaryIO, corpus: RawCorpus, name: str, truth: TextIO) -> None:
    """A last record cut in half, as a crawler killed mid-write leaves it."""
    index = corpus.spec.pages
    page = corpus.page(index)
    page = Page(
        index, "malformed", TRUNCATED, page.url, page.record_id, page.date, "text/html; charset=utf-8",
        page.payload, "", (),
    )  # fmt: skip
    whole = io.BytesIO()
    WARCWriter(whole, gzip=True).write_record(response_record(writer, page))
    warc.write(whole.getvalue()[: len(whole.getvalue()) // 2])
    truth.write(json.dumps(_truth(page, name, corpus)) + "\n")
