"""The generated raw web corpus: deterministic bytes, and a ground truth that tells the truth.

The WARC files are read back with warcio's own reader (not the extractor's), so what is
checked is what any WARC reader finds in them.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter, defaultdict
from dataclasses import replace
from html import escape
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from rules.webdata.blocks.raw_corpus.pages import RawCorpus, RawCorpusSpec
from rules.webdata.blocks.raw_corpus.pool import Pool
from rules.webdata.blocks.raw_corpus.warc import GROUND_TRUTH, WARC_DIRECTORY, write_raw_corpus

# Rates well above the defaults, so 240 pages hold several pages of every kind.
SPEC = RawCorpusSpec(
    seed=7,
    pages=240,
    pages_per_file=100,
    exact_duplicate_rate=0.1,
    near_duplicate_rate=0.1,
    boilerplate_rate=0.05,
    low_quality_rate=0.1,
    non_english_rate=0.05,
    malformed_rate=0.05,
    stdlib_modules=3,
)


@pytest.fixture(scope="module")
def pool() -> Pool:
    return Pool.load(SPEC.stdlib_modules)


@pytest.fixture(scope="module")
def written(tmp_path_factory, pool) -> Path:
    out = tmp_path_factory.mktemp("raw") / "corpus"
    write_raw_corpus(SPEC, out, RawCorpus(SPEC, pool))
    return out


def _truth(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / GROUND_TRUTH).read_text().splitlines()]


def _responses(out: Path) -> dict[str, bytes]:
    """Each response record's HTTP payload by target URL, in every WARC file."""
    payloads = {}
    for path in sorted((out / WARC_DIRECTORY).iterdir()):
        with open(path, "rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type == "response":
                    payloads[record.rec_headers.get_header("WARC-Target-URI")] = record.content_stream().read()
    return payloads


def _files(out: Path) -> dict[str, bytes]:
    return {path.relative_to(out).as_posix(): path.read_bytes() for path in sorted(out.rglob("*")) if path.is_file()}


def test_the_same_spec_writes_the_same_bytes_and_another_seed_others(tmp_path, pool, written) -> None:
    write_raw_corpus(SPEC, tmp_path / "again", RawCorpus(SPEC, pool))
    assert _files(tmp_path / "again") == _files(written)
    other = RawCorpusSpec(**{**SPEC.__dict__, "seed": 8})
    write_raw_corpus(other, tmp_path / "other", RawCorpus(other, pool))
    assert _files(tmp_path / "other")[GROUND_TRUTH] != _files(written)[GROUND_TRUTH]


def test_a_page_made_alone_is_the_page_of_the_whole_run(pool) -> None:
    corpus = RawCorpus(SPEC, pool)
    every = list(corpus.pages())
    assert [RawCorpus(SPEC, pool).page(index) for index in (0, 57, 239)] == [every[0], every[57], every[239]]


def test_every_kind_is_injected_and_the_ground_truth_counts_them(written) -> None:
    truth = _truth(written)
    kinds = Counter(entry["kind"] for entry in truth)
    assert set(kinds) == {
        "original",
        "exact_duplicate",
        "near_duplicate",
        "boilerplate",
        "low_quality",
        "non_english",
        "malformed",
    }
    assert len(truth) == SPEC.pages + 1  # and the truncated last record
    assert truth[-1]["kind"] == "malformed" and truth[-1]["detail"] == "truncated"
    # The rates hold roughly at this size (each kind's count is binomial).
    assert 0.05 * SPEC.pages < kinds["exact_duplicate"] < 0.2 * SPEC.pages, kinds


def test_exact_duplicates_carry_the_bytes_of_the_original_they_name(written) -> None:
    truth = _truth(written)
    by_url = {entry["url"]: entry for entry in truth}
    payloads = _responses(written)
    duplicates = [entry for entry in truth if entry["kind"] == "exact_duplicate"]
    assert duplicates
    for entry in duplicates:
        original = by_url[entry["copy_of"]]
        assert original["kind"] == "original" and original["page"] < entry["page"]
        assert original["record_id"] == entry["copy_of_record"]
        assert payloads[entry["url"]] == payloads[original["url"]]
        assert entry["url"] != original["url"]


def test_near_duplicates_differ_from_their_original_by_the_edits_recorded(pool) -> None:
    corpus = RawCorpus(SPEC, pool)
    near = [corpus.page(index) for index in range(SPEC.pages) if corpus.kind(index) == "near_duplicate"]
    assert near
    for page in near:
        original = corpus.page(page.copy_of)
        assert corpus.kind(page.copy_of) == "original"
        words, original_words = page.main_text.split(), original.main_text.split()
        assert page.main_text != original.main_text and page.edits >= 1
        # Each edit changes, drops or adds one word: the word counts differ by at most the edits.
        assert abs(len(words) - len(original_words)) <= page.edits
        assert page.edits <= 2 * SPEC.near_duplicate_edits * len(original_words) + 1
        assert page.payload != original.payload  # on another site: other boilerplate too


def test_the_main_text_of_an_original_is_in_its_html_and_the_boilerplate_around_it(pool) -> None:
    corpus = RawCorpus(SPEC, pool)
    page = next(corpus.page(i) for i in range(SPEC.pages) if corpus.kind(i) == "original")
    html = page.payload.decode()
    assert all(escape(block) in html for block in page.main_text.split("\n\n"))
    assert all(escape(phrase) in html for phrase in page.boilerplate) and page.byline in html
    assert not any(phrase in page.main_text for phrase in (*page.boilerplate, page.byline) if len(phrase.split()) > 3)


def test_the_warc_files_hold_a_response_per_page_and_end_in_a_cut_record(pool, written) -> None:
    truth = _truth(written)
    payloads = _responses(written)
    cut = truth[-1]["url"]
    assert set(payloads) - {cut} == {entry["url"] for entry in truth[:-1]}
    # warcio yields what it can of the cut record: never the whole page.
    assert payloads.get(cut) != RawCorpus(SPEC, pool).page(SPEC.pages).payload
    last = sorted((written / WARC_DIRECTORY).iterdir())[-1].read_bytes()
    with pytest.raises((EOFError, OSError)):
        gzip.decompress(last)  # the cut gzip member
    malformed = {entry["detail"]: payloads.get(entry["url"]) for entry in truth if entry["kind"] == "malformed"}
    if "empty_payload" in malformed:
        assert malformed["empty_payload"] == b""
    if "invalid_utf8" in malformed:
        with pytest.raises(UnicodeDecodeError):
            malformed["invalid_utf8"].decode("utf-8")


def test_non_english_pages_hold_translated_text(pool) -> None:
    corpus = RawCorpus(SPEC, pool)
    pages = [corpus.page(i) for i in range(SPEC.pages) if corpus.kind(i) == "non_english"]
    assert pages and all(page.detail != "en" and f'lang="{page.detail}"' in page.payload.decode() for page in pages)
    assert len(pool.translations) > 20


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"pages": 0}, "pages and pages_per_file must be positive"),
        ({"malformed_rate": 1.5}, "malformed_rate must be between 0 and 1"),
        ({"exact_duplicate_rate": 0.6, "near_duplicate_rate": 0.6}, "more than 1"),
        ({"stdlib_modules": -1}, "stdlib_modules must be None or at least 0"),
    ],
)
def test_a_bad_spec_is_refused_with_what_is_wrong(change, message) -> None:
    with pytest.raises(ValueError, match=message):
        RawCorpusSpec(**change)


def _shingles(text: str) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[at : at + 5]) for at in range(len(words) - 4)}


def test_originals_of_a_corpus_far_larger_than_the_pool_rarely_share_text(pool) -> None:
    """2,000 pages over a pool of about 570 paragraphs: drawn from the pool alone, nearly
    every paragraph would be in several originals and some pairs 0.6 similar or more; the
    pool grown with the corpus leaves most paragraphs in one original and no pair of
    originals a near duplicate by chance (5-word shingles, as dedup makes them)."""
    spec = replace(SPEC, pages=2000)
    corpus = RawCorpus(spec, pool)
    originals = {i: corpus.page(i).main_text for i in range(spec.pages) if corpus.kind(i) == "original"}
    pages_of: dict[str, set[int]] = defaultdict(set)
    for index, text in originals.items():
        for paragraph in text.split("\n\n")[1:]:  # after the title
            pages_of[paragraph].add(index)
    drawn = sum(len(pages) for pages in pages_of.values())
    shared = sum(len(pages) for pages in pages_of.values() if len(pages) > 1)
    assert len(pool.prose) < 600 and shared < 0.3 * drawn, (len(pool.prose), shared, drawn)
    pairs = {(a, b) for pages in pages_of.values() for a in pages for b in pages if a < b}
    shingles = {index: _shingles(text) for index, text in originals.items()}
    similarity = max(len(shingles[a] & shingles[b]) / len(shingles[a] | shingles[b]) for a, b in pairs)
    assert similarity < 0.6, similarity
