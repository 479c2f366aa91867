"""Extraction from WARC files in the shapes real tools write (tests/helpers_warc.py): each
page's text is the text a browser shows of it, and each bad input a reader meets in crawls
from outside (a header that lies, a charset Python should never look up, a bomb, a page
built to be slow) is a counted skip with its reason, or the page read right (issue #35)."""

from __future__ import annotations

import gzip
import json
import zlib
from collections import Counter
from pathlib import Path

import brotli
import pytest
import zstandard
from helpers_warc import (
    ENGLISH,
    FRENCH,
    JAPANESE,
    RUSSIAN,
    Page,
    browsertrix_records,
    chunked,
    common_crawl_records,
    gzip_bomb,
    heritrix_records,
    html_response,
    warcio_records,
    warcprox_records,
    wget_records,
    write_warc,
)

from marinbuild.targets.context import StepFailed
from rules.common.corpus import SPLITS
from rules.webdata.blocks.documents import Skips
from rules.webdata.blocks.extract import ExtractConfig, read_html, read_warc
from rules.webdata.blocks.extract_worker import budgeted_extraction
from rules.webdata.extract_text import extract_into, held_out

DEFAULT = ExtractConfig()


def _read(path: Path, config: ExtractConfig = DEFAULT) -> tuple[dict[str, str], Counter[str], Skips]:
    """{url: text} of the documents of a WARC file, and its skips by reason."""
    skips = Skips()
    documents = {document.url: document.text for document in read_warc(path, skips, config)}
    return documents, skips.counts, skips


def _texts(*pages: Page) -> dict[str, str]:
    return {page.url: page.text for page in pages}


# -- the shapes of the tools ---------------------------------------------------------------------


@pytest.mark.parametrize("gzipped", ["per record", "whole", "split"])
def test_a_warcio_recording_gives_its_gzipped_page_and_counts_its_other_records(tmp_path, gzipped) -> None:
    """Webrecorder's shape: the body gzipped as the server sent it (was: 'invalid text
    encoding'), in a file gzipped a member per record, as one member, or a record across two."""
    documents, skips, _ = _read(write_warc(tmp_path / "rec.warc.gz", warcio_records(ENGLISH), gzipped))
    assert documents == _texts(ENGLISH)
    assert skips == {"warcinfo record": 2, "request record": 2, "revisit record": 1}


def test_a_warcprox_recording_gives_its_chunked_page_without_the_chunk_sizes(tmp_path) -> None:
    """The body chunked as sent, sizes zero-padded (was: '001c37 ...' in the text)."""
    documents, skips, _ = _read(write_warc(tmp_path / "rec.warc", warcprox_records(ENGLISH), "none"))
    assert documents == _texts(ENGLISH)
    assert skips == {"warcinfo record": 1, "request record": 1}


def test_a_wget_archive_gives_its_page_in_the_charset_of_its_meta_and_its_url_unbracketed(tmp_path) -> None:
    """windows-1252 declared in <meta http-equiv> alone (was: 'invalid text encoding'): its
    '€', '—' and 'œ' are bytes 0x80-0x9F, which ISO-8859-1 would make control characters."""
    documents, skips, _ = _read(write_warc(tmp_path / "site.warc.gz", wget_records(FRENCH)))
    assert documents == _texts(FRENCH)
    assert skips == {"warcinfo record": 1, "request record": 1, "metadata record": 1, "resource record": 1}


def test_a_heritrix_crawl_gives_its_shift_jis_page_and_the_part_of_a_truncated_one(tmp_path) -> None:
    """Shift_JIS from <meta http-equiv> (Microsoft's, with its '①'); a gzip body cut at the
    crawl's length limit gives the text received, as a browser shows it; a dns: record is
    no HTTP response."""
    documents, skips, _ = _read(write_warc(tmp_path / "crawl.warc.gz", heritrix_records(JAPANESE, ENGLISH)))
    assert documents[JAPANESE.url] == JAPANESE.text
    cut = documents[ENGLISH.url]
    assert ENGLISH.text.startswith(cut) and ENGLISH.paragraphs[0] in cut and cut != ENGLISH.text
    assert skips == {
        "warcinfo record": 1,
        "not an http response": 1,
        "request record": 2,
        "metadata record": 2,
        "revisit record": 1,
    }


def test_a_browser_based_crawl_gives_pages_it_decoded_and_pages_it_kept_encoded(tmp_path) -> None:
    """Browsertrix's shape: WARC/1.1, header names in lower case; a body the browser decoded
    (`x-orig-content-encoding: br` is not undone again) and one still Brotli'd."""
    documents, skips, _ = _read(write_warc(tmp_path / "rec.warc.gz", browsertrix_records(FRENCH, RUSSIAN)))
    assert documents == _texts(FRENCH, RUSSIAN)
    assert skips == {"warcinfo record": 1, "request record": 1, "resource record": 2}


def test_a_common_crawl_file_gives_its_decoded_pages_and_a_truncated_one_cut_inside_a_character(tmp_path) -> None:
    """`X-Crawler-Content-Encoding: gzip` over the decoded body is not undone; a page cut at
    the crawl's limit inside a character gives the text before it (was: 'invalid text
    encoding')."""
    documents, skips, _ = _read(write_warc(tmp_path / "cc.warc.gz", common_crawl_records(RUSSIAN, FRENCH)))
    assert documents[RUSSIAN.url] == RUSSIAN.text
    assert FRENCH.text.startswith(documents[FRENCH.url]) and FRENCH.paragraphs[0] in documents[FRENCH.url]
    assert skips == {"warcinfo record": 1, "request record": 2, "metadata record": 2}


def test_concatenated_warc_files_give_every_page_and_a_cut_member_keeps_the_records_before_it(tmp_path) -> None:
    first = write_warc(tmp_path / "a.warc.gz", warcio_records(ENGLISH))
    second = write_warc(tmp_path / "b.warc.gz", wget_records(FRENCH))
    (tmp_path / "both.warc.gz").write_bytes(first.read_bytes() + second.read_bytes())
    documents, skips, _ = _read(tmp_path / "both.warc.gz")
    assert documents == _texts(ENGLISH, FRENCH)
    assert sum(skips.values()) == 5 + 4

    whole = second.read_bytes()
    last = gzip.compress(wget_records(FRENCH)[-1], mtime=0)
    (tmp_path / "cut.warc.gz").write_bytes(first.read_bytes() + whole[: len(whole) - len(last) // 2])
    documents, skips, _ = _read(tmp_path / "cut.warc.gz")
    assert documents == _texts(ENGLISH, FRENCH)
    assert skips["resource record"] + skips["truncated record"] + skips["unreadable warc"] == 1


# -- charsets ------------------------------------------------------------------------------------


def _one_page(tmp_path: Path, http: list[tuple[str, str]], body: bytes, then: Page = ENGLISH) -> Path:
    """A WARC file of one page, then a good one (so that the file is seen to go on)."""
    records = [
        html_response("http://bad.example/", http, body),
        html_response(then.url, [("Content-Type", "text/html; charset=utf-8")], then.html().encode()),
    ]
    return write_warc(tmp_path / "one.warc.gz", records)


@pytest.mark.parametrize("label", ["undefined", "punycode", "rot13", "base64", "x-no-such-charset"])
def test_a_header_charset_the_encoding_standard_does_not_name_is_a_counted_skip(tmp_path, label) -> None:
    """Never a Python codec looked up by that name (punycode's UnicodeError failed the step)."""
    path = _one_page(tmp_path, [("Content-Type", f"text/html; charset={label}")], ENGLISH.html().encode())
    documents, skips, found = _read(path)
    assert documents == _texts(ENGLISH) and skips == {"unknown charset": 1}
    assert found.first["unknown charset"] == "one.warc.gz:record 1 (http://bad.example/)"


@pytest.mark.parametrize(
    ("page", "head", "codec"),
    [
        (FRENCH, '<meta charset="windows-1252">', "cp1252"),
        (FRENCH, '<meta charset="iso-8859-1">', "cp1252"),  # the label means windows-1252: '€' is 0x80
        (JAPANESE, '<META HTTP-EQUIV="Content-Type" CONTENT="text/html; charset=Shift_JIS">', "cp932"),
        (RUSSIAN, "<meta content='text/html; charset=koi8-r' http-equiv=content-type>", "koi8_r"),
        (FRENCH, '<meta charset="utf-16">', "utf-8"),  # a meta saying UTF-16 means UTF-8
    ],
)
def test_a_page_naming_its_charset_in_its_meta_alone_is_read_in_it(tmp_path, page, head, codec) -> None:
    path = _one_page(tmp_path, [("Content-Type", "text/html")], page.html(head).encode(codec))
    documents, skips, _ = _read(path)
    assert documents == {"http://bad.example/": page.text, ENGLISH.url: ENGLISH.text} and not skips


def test_a_byte_order_mark_beats_the_header_and_the_header_beats_the_meta(tmp_path) -> None:
    bom = b"\xff\xfe" + FRENCH.html('<meta charset="koi8-r">').encode("utf-16-le")
    documents, skips, _ = _read(_one_page(tmp_path, [("Content-Type", "text/html; charset=iso-8859-1")], bom))
    assert documents["http://bad.example/"] == FRENCH.text and not skips
    cyrillic = RUSSIAN.html('<meta charset="utf-8">').encode("windows-1251")
    documents, skips, _ = _read(_one_page(tmp_path, [("Content-Type", "text/html; charset=windows-1251")], cyrillic))
    assert documents["http://bad.example/"] == RUSSIAN.text and not skips
    # The header wins even when it is wrong: a page not valid in it is skipped, not guessed at.
    western = FRENCH.html('<meta charset="windows-1252">').encode("cp1252")
    documents, skips, _ = _read(_one_page(tmp_path, [("Content-Type", "text/html; charset=utf-8")], western))
    assert documents == _texts(ENGLISH) and skips == {"invalid text encoding": 1}


def test_a_page_declaring_no_charset_is_read_in_the_one_detected(tmp_path) -> None:
    body = RUSSIAN.html("").encode("windows-1251")
    documents, skips, _ = _read(_one_page(tmp_path, [("Content-Type", "text/html")], body))
    assert documents["http://bad.example/"] == RUSSIAN.text and not skips
    latin = Page("latin1.html", "Crème brûlée", ("Le café du coin sert une crème brûlée près de la fenêtre.",), "fr")
    (tmp_path / "latin1.html").write_bytes(latin.html("").encode("latin-1"))
    document = read_html(tmp_path / "latin1.html", Skips())
    assert document is not None and document.text == latin.text


def test_a_meta_past_the_first_1024_bytes_or_an_endless_attribute_is_not_read(tmp_path) -> None:
    """The prescan looks at 1,024 bytes, whatever follows (a 4 MB attribute value never
    closed, a meta after them): the windows-1252 page is read in the charset detected."""
    endless = '<meta name="x" content="' + "charset=koi8-r; " * 250_000 + '">'
    late = " " * 1024 + '<meta charset="koi8-r">'
    for head in (endless, late):
        body = FRENCH.html(head).encode("cp1252")
        documents, skips, _ = _read(_one_page(tmp_path, [("Content-Type", "text/html")], body))
        assert documents == {"http://bad.example/": FRENCH.text, ENGLISH.url: ENGLISH.text} and not skips


# -- codings, and headers that lie ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("http", "encode"),
    [
        ([("Content-Encoding", "gzip")], gzip.compress),
        ([("Content-Encoding", "x-gzip")], lambda b: gzip.compress(b[:100]) + gzip.compress(b[100:])),
        ([("Content-Encoding", "deflate")], zlib.compress),
        ([("Content-Encoding", "deflate")], lambda b: zlib.compress(b, wbits=-15)),  # raw, as many servers send
        ([("Content-Encoding", "br")], brotli.compress),
        ([("Content-Encoding", "zstd")], zstandard.ZstdCompressor().compress),
        ([("Content-Encoding", "gzip"), ("Content-Encoding", "br")], lambda b: brotli.compress(gzip.compress(b))),
        ([("Transfer-Encoding", "chunked"), ("Content-Encoding", "gzip")], lambda b: chunked(gzip.compress(b), 50)),
        ([("Content-Encoding", "br"), ("Transfer-Encoding", "gzip")], lambda b: gzip.compress(brotli.compress(b))),
        ([("Transfer-Encoding", "chunked")], lambda b: b"1000000000000000\r\n" + b),  # a chunk of 2^60: cut short
        ([("Transfer-Encoding", "chunked")], lambda b: b),  # not chunked under a chunked header
        ([("Content-Encoding", "gzip")], lambda b: b),  # a gzip header over the plain page
        ([("Content-Encoding", "br")], lambda b: b),
        ([("Content-Encoding", "sdch")], lambda b: b),  # a coding no browser undoes, over the plain page
    ],
)
def test_every_coding_is_undone_and_a_header_that_lies_leaves_the_body_as_it_is(tmp_path, http, encode) -> None:
    body = encode(FRENCH.html().encode())
    documents, skips, _ = _read(_one_page(tmp_path, [("Content-Type", "text/html; charset=utf-8"), *http], body))
    assert documents == {"http://bad.example/": FRENCH.text, ENGLISH.url: ENGLISH.text} and not skips


def test_a_body_that_cannot_be_undone_is_a_counted_skip_never_garbage(tmp_path) -> None:
    page = FRENCH.html().encode()
    corrupt = bytearray(gzip.compress(page))
    corrupt[len(corrupt) // 2] ^= 0xFF
    cases = {
        "bad content encoding": ([("Content-Encoding", "gzip")], bytes(corrupt)),
        "unsupported content encoding": ([("Content-Encoding", "compress")], b"\x1f\x9d\x90<\x00\x01\x02"),
        "bad chunked encoding": ([("Transfer-Encoding", "chunked")], b"40\r\n" + page[:64] + b"\r\nnot a size\r\n"),
    }
    for reason, (http, body) in cases.items():
        documents, skips, _ = _read(_one_page(tmp_path, [("Content-Type", "text/html"), *http], body))
        assert documents == _texts(ENGLISH) and skips == {reason: 1}, reason


@pytest.mark.parametrize(
    ("http", "body"),
    [
        ([("Content-Encoding", "gzip")], gzip_bomb(2**30)),  # 1 GiB of zeros, in 1,024 members
        ([("Content-Encoding", "gzip")], zlib.compress(bytes(64 * 2**20), 1, wbits=31)),  # 64 MiB, one member
        ([("Content-Encoding", "br")], brotli.compress(bytes(64 * 2**20), quality=1)),
        ([("Content-Encoding", "zstd")], zstandard.ZstdCompressor().compress(bytes(64 * 2**20))),
    ],
)
def test_a_body_that_decodes_past_the_size_limit_is_too_large_and_never_decoded_whole(tmp_path, http, body) -> None:
    """Each body is stored in less than the limit (4 MiB) and decodes to more."""
    config = ExtractConfig(max_payload_bytes=4 * 2**20)
    documents, skips, _ = _read(_one_page(tmp_path, [("Content-Type", "text/html"), *http], body), config)
    assert documents == _texts(ENGLISH) and skips == {"too large": 1}


# -- budgets: depth and time ---------------------------------------------------------------------

DEEP = b"<html><body>" + b"<div>" * 100_000 + b"text" + b"</div>" * 100_000 + b"</body></html>"  # 1.1 MB
# 400 levels of <div> over 200,000 paragraphs: within the depth, but minutes of extraction.
SLOW = b"<html><body>" + b"<div>" * 400 + b"<p>slow</p>" * 200_000 + b"</body></html>"


def test_a_page_nested_past_the_depth_is_a_counted_skip_and_the_file_goes_on(tmp_path) -> None:
    """100,000 nested <div>s (190 s to extract before); a page of unclosed paragraphs and list
    items, whose tags alone look deep, is read."""
    sloppy = (
        b"<html><body><main>" + b"<p>An old page that never closes its paragraphs." * 3000 + b"</main></body></html>"
    )
    path = _one_page(tmp_path, [("Content-Type", "text/html")], DEEP)
    documents, skips, found = _read(path)
    assert documents == _texts(ENGLISH) and skips == {"too deeply nested": 1}
    assert found.first["too deeply nested"] == "one.warc.gz:record 1 (http://bad.example/)"
    documents, skips, _ = _read(_one_page(tmp_path, [("Content-Type", "text/html")], sloppy))
    assert documents["http://bad.example/"].startswith("An old page") and not skips
    within = b"<html><body>" + b"<div>" * 500 + b"<p>Deep, but no deeper than browsers nest.</p></body></html>"
    documents, skips, _ = _read(_one_page(tmp_path, [("Content-Type", "text/html")], within))
    assert documents["http://bad.example/"] == "Deep, but no deeper than browsers nest." and not skips


@pytest.mark.parametrize(
    "body",
    [
        b"<html><body>" + b"<div>" * 700 + b"<p>Deep.</p></body></html>",
        b"</div>" * 700 + b"<html><body>" + b"<div>" * 700 + b"<p>Deep after stray end tags.</p></body></html>",
        b"<html><body>" + b"<br><img src=x>" * 700 + b"<div>" * 700 + b"<p>Deep among void tags.</p></body></html>",
    ],
    ids=["nested", "after stray end tags", "among void tags"],
)
def test_a_page_past_the_depth_is_found_whatever_its_other_tags(tmp_path, body) -> None:
    """Past 512 levels, whatever comes before the nesting: end tags without their start
    tags (the parser drops them) or void elements do not hide it."""
    documents, skips, _ = _read(_one_page(tmp_path, [("Content-Type", "text/html")], body))
    assert documents == _texts(ENGLISH) and skips == {"too deeply nested": 1}


def _budgeted(path: Path, config: ExtractConfig, fmt: str = "warc", fraction: float = 0.0) -> tuple[list[bytes], dict]:
    """What a unit writes of the file (through the children that bound each record's time):
    its train and validation lines, and its counts."""
    out = path.parent / f"{path.name}.out"
    out.mkdir()
    counts = extract_into(out, path, fmt, path.name, config, fraction, lambda done: None)
    return [(out / f"{split}.jsonl").read_bytes() for split in SPLITS], counts


def _in_process(path: Path, fraction: float = 0.0) -> list[bytes]:
    """The train and validation lines of the documents read in this process, no time bounded."""
    lines: dict[bool, list[bytes]] = {False: [], True: []}
    for document in read_warc(path, Skips()):
        lines[held_out(document.id, fraction)].append(json.dumps(document.to_json(), ensure_ascii=False).encode())
    return [b"".join(line + b"\n" for line in lines[validation]) for validation in (False, True)]


def _response(url: str, body: bytes) -> bytes:
    return html_response(url, [("Content-Type", "text/html")], body)


def test_a_record_over_its_time_is_a_counted_skip_where_it_was_met_and_the_file_goes_on(tmp_path) -> None:
    records = [
        _response(ENGLISH.url, ENGLISH.html().encode()),
        _response("http://slow.example/", SLOW),
        _response(FRENCH.url, FRENCH.html().encode()),
    ]
    path = write_warc(tmp_path / "hostile.warc.gz", records)
    config = ExtractConfig(max_record_seconds=0.25)
    (train, validation), counts = _budgeted(path, config)
    assert [json.loads(line)["text"] for line in train.splitlines()] == [ENGLISH.text, FRENCH.text] and not validation
    assert counts["skipped"] == {
        "over time budget": {"count": 1, "first": "hostile.warc.gz:record 2 (http://slow.example/)"}
    }
    (tmp_path / "slow.html").write_bytes(SLOW)
    assert _budgeted(tmp_path / "slow.html", config, "html") == (
        [b"", b""],
        {
            "documents": {"train": 0, "validation": 0},
            "skipped": {"over time budget": {"count": 1, "first": "slow.html"}},
        },
    )


def test_records_over_their_time_mid_file_leave_every_other_written_once_in_order(tmp_path) -> None:
    """Two children ended by their timer in the middle of a file: what each wrote before it
    stays, once; the next goes on after the record that ran out of time; the unit's outputs
    are byte for byte those of the file without the slow records read in this process."""
    pages = [
        _response(f"http://site.example/{number}", f"<html><body><p>Page {number} of the site.</p>".encode())
        for number in range(8)
    ]
    slow = [_response(f"http://slow.example/{number}", SLOW) for number in range(2)]
    path = write_warc(tmp_path / "mid.warc.gz", [*pages[:3], slow[0], *pages[3:6], slow[1], *pages[6:]])
    fraction = 0.5
    outputs, counts = _budgeted(path, ExtractConfig(max_record_seconds=0.25), fraction=fraction)
    expected = _in_process(write_warc(tmp_path / "fast.warc.gz", pages), fraction)
    assert outputs == expected and all(expected)  # documents in both splits
    assert counts == {
        "documents": {"train": expected[0].count(b"\n"), "validation": expected[1].count(b"\n")},
        "skipped": {"over time budget": {"count": 2, "first": "mid.warc.gz:record 4 (http://slow.example/0)"}},
    }


def test_a_child_after_a_record_over_time_passes_over_the_records_before_it_untimed(tmp_path) -> None:
    """Thousands of records before the slow one take a new child longer to pass over than
    the budget: that is no record's time (it stopped every new child at the same place)."""
    fast = [html_response(f"http://fast.example/{i}", [("Content-Type", "text/plain")], b"x") for i in range(3000)]
    path = write_warc(
        tmp_path / "many.warc.gz",
        [*fast, _response("http://slow.example/", SLOW), _response(ENGLISH.url, ENGLISH.html().encode())],
    )
    (train, _), counts = _budgeted(path, ExtractConfig(max_record_seconds=0.005))
    assert counts["skipped"] == {
        "not html": {"count": 3000, "first": "many.warc.gz:record 1 (http://fast.example/0)"},
        "over time budget": {"count": 1, "first": "many.warc.gz:record 3001 (http://slow.example/)"},
    }
    assert [json.loads(line)["text"] for line in train.splitlines()] == [ENGLISH.text]


def test_a_child_that_fails_fails_the_unit_with_its_error_naming_the_file_and_the_record(tmp_path) -> None:
    """A failure that is no record's time (here: an output the child cannot write) is one
    line naming the file and where, never a retry of the record or a hang."""
    path = write_warc(tmp_path / "one.warc.gz", [_response(ENGLISH.url, ENGLISH.html().encode())])
    (tmp_path / "train.jsonl").touch()
    with open(tmp_path / "train.jsonl", "rb", buffering=0) as unwritable, pytest.raises(StepFailed) as failed:
        budgeted_extraction(
            path, "warc", "one.warc.gz", DEFAULT, {"train": unwritable}, lambda _: "train", lambda _: None
        )
    assert (
        str(failed.value)
        == "one.warc.gz: the extraction of record 1 failed: UnsupportedOperation: File not open for writing"
    )


def test_every_page_of_the_shapes_is_written_the_same_through_the_budgeted_child(tmp_path) -> None:
    path = write_warc(tmp_path / "cc.warc.gz", common_crawl_records(ENGLISH, FRENCH))
    skips = Skips()
    list(read_warc(path, skips))
    outputs, counts = _budgeted(path, ExtractConfig(), fraction=0.5)
    assert outputs == _in_process(path, 0.5) and counts["skipped"] == skips.to_json()
