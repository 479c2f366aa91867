"""`extract_text` (issue #29): the main text of WARC and HTML files as a sharded step — a unit
per file, URLs and metadata kept, every record that gives no document a counted skip, a
file that is no WARC a failed unit naming it — and what reruns downstream (`filter_text`)
when a file is added or a filter's parameter changes. Issue #35: crawls other tools wrote,
and hostile pages, each record within its budget."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import build_json, run_cli, statuses
from helpers_warc import ENGLISH, FRENCH, JAPANESE, html_response, warcio_records, warcprox_records, write_warc
from helpers_workspace import assert_bad_input, build

from rules.webdata.blocks.raw_corpus.pages import RawCorpusSpec
from rules.webdata.blocks.raw_corpus.warc import GROUND_TRUTH, write_raw_corpus
from rules.webdata.extract_text import held_out

RULES = 'rules = ["rules.webdata.decls"]\n'
# What each kind of page that gives no document is counted as.
SKIP_REASONS = {
    "invalid_utf8": "invalid text encoding",
    "empty_payload": "empty payload",
    "not_http": "not an http response",
    "binary_payload": "not html",
    "truncated": "truncated record",
    "boilerplate": "no main text",
}


def _documents(out: Path, split: str) -> list[dict]:
    return [json.loads(line) for shard in sorted((out / split).glob("shard-*.jsonl")) for line in shard.open()]


def _units(store: Path) -> Counter[str]:
    """How many times each unit ran (`//p:step [unit]`), from the attempt records."""
    records = [json.loads(path.read_text()) for path in (store / "attempts").rglob("*.json")]
    return Counter(record["label"] for record in records if "shard_of" in record)


def _output(built: dict, label: str) -> Path:
    return Path(built["by_label"][label]["output"])


def test_extract_text_keeps_urls_and_metadata_and_counts_every_skip(make_workspace):
    ws = make_workspace(
        {
            "p/BUILD.marin": """
synthetic_web_pages(
    name = "pages", pages = 160, pages_per_file = 40, seed = 5, stdlib_modules = 2,
    malformed_rate = 0.1, boilerplate_rate = 0.05, non_english_rate = 0.05,
)
extract_text(name = "text", srcs = [":pages"], validation_fraction = 0.2)
"""
        },
        RULES,
    )
    built = build_json(ws, "//p:text")
    pages, out = _output(built, "//p:pages"), _output(built, "//p:text")
    truth = [json.loads(line) for line in (pages / GROUND_TRUTH).read_text().splitlines()]
    train, validation = _documents(out, "train"), _documents(out, "validation")
    documents = train + validation
    with_text = [page for page in truth if page["kind"] not in ("malformed", "boilerplate")]
    assert sorted((d["url"], d["id"]) for d in documents) == sorted((p["url"], p["record_id"]) for p in with_text)
    for document in documents:
        metadata = document["metadata"]
        assert metadata["warc_record_id"] == document["id"] and metadata["content_type"] == "text/html"
        assert metadata["warc_date"].startswith("2024-01-01T")
    assert all(held_out(d["id"], 0.2) for d in validation) and not any(held_out(d["id"], 0.2) for d in train)
    assert 0 < len(validation) < len(train)

    summary = json.loads((out / "summary.json").read_text())
    expected = Counter(SKIP_REASONS[page["detail"] or page["kind"]] for page in truth if page not in with_text)
    expected["warcinfo record"] = 4  # a file's first record
    expected["request record"] = sum(page["detail"] != "truncated" for page in truth)  # before each response
    assert {reason: skip["count"] for reason, skip in summary["skipped"].items()} == expected
    assert len(expected) >= 6  # several reasons met
    assert summary["skipped"]["truncated record"]["first"].startswith("pages/warc/part-00003.warc.gz:record ")
    assert summary["documents"] == {"train": len(train), "validation": len(validation)}
    assert sorted(summary["files"]) == [f"pages/warc/part-{i:05d}.warc.gz" for i in range(4)]
    assert sum(sum(item["documents"].values()) for item in summary["files"].values()) == len(documents)
    assert _units(ws / "cache") == Counter({f"//p:text [pages/warc/part-{i:05d}.warc.gz]": 1 for i in range(4)})

    again = build_json(ws, "//p:text")
    assert set(statuses(again).values()) == {"cached"} and sum(_units(ws / "cache").values()) == 4


FILTERED = """
extract_text(name = "text", srcs = glob(["raw/*.warc.gz"]))
filter_text(name = "filtered", data = ":text", filters = [{{"name": "gopher_quality", "min_words": {min_words}}}])
"""


def _warc_files(directory: Path, seed: int, files: int) -> list[Path]:
    spec = RawCorpusSpec(seed=seed, pages=30 * files, pages_per_file=30, stdlib_modules=2, truncate_last_record=False)
    write_raw_corpus(spec, directory)
    return sorted((directory / "warc").iterdir())


def test_a_file_added_extracts_and_filters_only_that_file_and_a_filter_change_no_extraction(make_workspace, tmp_path):
    ws = make_workspace({"p/BUILD.marin": FILTERED.format(min_words=50)}, RULES)
    (ws / "p" / "raw").mkdir()
    for path in _warc_files(tmp_path / "first", seed=1, files=3):
        shutil.copy(path, ws / "p" / "raw" / path.name)
    first = build_json(ws, "//p:filtered")
    assert statuses(first) == {"//p:text": "built", "//p:filtered": "built"}
    units = _units(ws / "cache")
    assert sorted(unit for unit in units if unit.startswith("//p:text")) == [
        f"//p:text [raw/part-{i:05d}.warc.gz]" for i in range(3)
    ]
    filtered_units = sum(count for unit, count in units.items() if unit.startswith("//p:filtered"))
    shards = json.loads((_output(first, "//p:text") / "summary.json").read_text())["shards"]
    assert filtered_units == shards["train"] + shards["validation"]

    [added] = _warc_files(tmp_path / "second", seed=2, files=1)
    shutil.copy(added, ws / "p" / "raw" / "later.warc.gz")
    second = build_json(ws, "//p:filtered")
    assert statuses(second) == {"//p:text": "built", "//p:filtered": "built"}
    ran = _units(ws / "cache") - units
    new_shard = json.loads((_output(second, "//p:text") / "summary.json").read_text())["files"]["raw/later.warc.gz"]
    new_shards = sum(1 for count in new_shard["documents"].values() if count)
    assert ran == Counter(
        {"//p:text [raw/later.warc.gz]": 1}
        | {f"//p:filtered [{split}/{new_shard['shard']}]": 1 for split, n in new_shard["documents"].items() if n}
    )
    assert new_shards >= 1
    before = {p.relative_to(_output(first, "//p:text")) for p in _output(first, "//p:text").rglob("*.jsonl")}
    after = {p.relative_to(_output(second, "//p:text")) for p in _output(second, "//p:text").rglob("*.jsonl")}
    assert before < after and len(after - before) == new_shards  # the other shards keep their names

    units = _units(ws / "cache")
    (ws / "p" / "BUILD.marin").write_text(FILTERED.format(min_words=20))
    third = build_json(ws, "//p:filtered")
    assert statuses(third) == {"//p:text": "cached", "//p:filtered": "built"}
    ran = _units(ws / "cache") - units
    assert all(unit.startswith("//p:filtered [") for unit in ran) and sum(ran.values()) == len(after)


def test_a_bad_format_is_an_error_at_its_build_line(make_workspace):
    ws = make_workspace({"p/BUILD.marin": '\nextract_text(name = "text", srcs = ["a.pdf"], format = "pdf")\n'}, RULES)
    assert_bad_input(build(ws, "//p:text"), ws, "p/BUILD.marin", 2, "extract_text 'text': format must be one of")
    ws = make_workspace({"p/BUILD.marin": 'extract_text(name = "text", srcs = [], format = "warc")\n'}, RULES)
    assert_bad_input(build(ws, "//p:text"), ws, "p/BUILD.marin", 1, "extract_text 'text': srcs is empty")


def test_a_file_that_is_not_warc_fails_its_unit_by_name_and_the_others_are_kept(make_workspace, tmp_path):
    ws = make_workspace(
        {
            "p/BUILD.marin": 'extract_text(name = "text", srcs = ["good.warc.gz", "notes.warc.gz"])\n',
            "p/notes.warc.gz": "",
        },
        RULES,
    )
    (ws / "p" / "notes.warc.gz").write_bytes(gzip.compress(b"these are notes, not a web archive\n"))
    shutil.copy(_warc_files(tmp_path / "corpus", seed=3, files=1)[0], ws / "p" / "good.warc.gz")
    rc, _, err = run_cli(ws, "build", "//p:text")
    assert rc == 1 and "notes.warc.gz is not a WARC file" in err and "Traceback" not in err, err
    assert _units(ws / "cache") == Counter({"//p:text [good.warc.gz]": 1, "//p:text [notes.warc.gz]": 1})
    (ws / "p" / "BUILD.marin").write_text('extract_text(name = "text", srcs = ["good.warc.gz"])\n')
    assert statuses(build_json(ws, "//p:text")) == {"//p:text": "built"}
    assert sum(_units(ws / "cache").values()) == 2  # the good file's unit was published: not run again


@pytest.fixture
def html_pages(make_workspace) -> Path:
    page = "<html><body><main><h1>A page</h1><p>{}</p></main></body></html>"
    ws = make_workspace(
        {
            "p/BUILD.marin": 'extract_text(name = "text", srcs = glob(["site/*.html"]), format = "html")\n',
            "p/site/good.html": page.format("The river runs through the valley, and the town fishes in it."),
            "p/site/held.html": page.format("The library opens at nine and closes at five every day."),
            "p/site/empty.html": "",
        },
        RULES,
    )
    (ws / "p" / "site" / "latin1.html").write_bytes(page.format("caf\xe9 cr\xe8me br\xfbl\xe9e").encode("latin-1"))
    with open(ws / "p" / "site" / "huge.html", "wb") as huge:  # 100 MB, sparse
        huge.truncate(100 * 2**20)
    return ws


def test_html_files_give_a_document_each_and_bad_ones_counted_skips(html_pages):
    out = _output(build_json(html_pages, "//p:text"), "//p:text")
    documents = _documents(out, "train") + _documents(out, "validation")
    assert sorted(document["id"] for document in documents) == ["site/good.html", "site/held.html", "site/latin1.html"]
    assert all("url" not in document and document["text"].startswith("A page") for document in documents)
    # A page that declares no charset is read in the one detected (it was 'invalid text encoding').
    assert next(d["text"] for d in documents if d["id"] == "site/latin1.html").endswith("caf\xe9 cr\xe8me br\xfbl\xe9e")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["skipped"] == {
        "no main text": {"count": 1, "first": "site/empty.html"},
        "too large": {"count": 1, "first": "site/huge.html"},
    }


def test_files_that_give_no_document_fail_the_step_with_their_skips(html_pages):
    (html_pages / "p" / "BUILD.marin").write_text(
        'extract_text(name = "text", srcs = ["site/empty.html", "site/huge.html"], format = "html")\n'
    )
    rc, _, err = run_cli(html_pages, "build", "//p:text")
    assert rc == 1 and "no document extracted into the train split from 2 files" in err and "too large" in err, err
    assert "Traceback" not in err


HOSTILE = """
extract_text(name = "text", srcs = glob(["crawls/*"]), max_record_seconds = 0.5)
"""


def test_real_crawls_give_their_pages_and_a_hostile_page_is_a_counted_skip_the_unit_going_on(make_workspace, tmp_path):
    """Issue #35's bad inputs through the step: a gzip body and a chunked one (warcio's and
    warcprox's shapes) give their pages' text; a header naming `punycode` is a counted skip
    (it failed the step with a traceback); a page nested 100,000 deep is skipped at once,
    and a page within the depth that takes minutes is stopped at its time, the records after
    it extracted."""
    ws = make_workspace({"p/BUILD.marin": HOSTILE}, RULES)
    crawls = ws / "p" / "crawls"
    crawls.mkdir()
    write_warc(crawls / "recording.warc.gz", warcio_records(ENGLISH))
    write_warc(crawls / "proxy.warc", warcprox_records(FRENCH), "none")
    html = [("Content-Type", "text/html")]
    write_warc(
        crawls / "hostile.warc.gz",
        [
            html_response("http://puny.example/", [("Content-Type", "text/html; charset=punycode")], b"<p>x</p>"),
            html_response("http://deep.example/", html, b"<html><body>" + b"<div>" * 100_000 + b"</body></html>"),
            html_response("http://slow.example/", html, b"<div>" * 400 + b"<p>slow</p>" * 200_000),
            html_response(JAPANESE.url, html, JAPANESE.html('<meta charset="shift_jis">').encode("cp932")),
        ],
    )
    built = build_json(ws, "//p:text")
    out = _output(built, "//p:text")
    documents = {d["url"]: d["text"] for d in _documents(out, "train") + _documents(out, "validation")}
    assert documents == {page.url: page.text for page in (ENGLISH, FRENCH, JAPANESE)}
    skipped = json.loads((out / "summary.json").read_text())["skipped"]
    assert {reason: skipped[reason] for reason in ("unknown charset", "too deeply nested", "over time budget")} == {
        "unknown charset": {"count": 1, "first": "crawls/hostile.warc.gz:record 1 (http://puny.example/)"},
        "too deeply nested": {"count": 1, "first": "crawls/hostile.warc.gz:record 2 (http://deep.example/)"},
        "over time budget": {"count": 1, "first": "crawls/hostile.warc.gz:record 3 (http://slow.example/)"},
    }


def test_a_budget_out_of_range_is_an_error_at_its_build_line(make_workspace):
    for attribute, value, message in [
        ("max_record_seconds", "0", "max_record_seconds must be positive and at most 86,400, got 0"),
        ("max_nesting_depth", "1000000", "max_nesting_depth must be positive and at most 100,000, got 1000000"),
    ]:
        ws = make_workspace(
            {"p/BUILD.marin": f'\nextract_text(name = "t", srcs = ["a.warc"], {attribute} = {value})\n'}, RULES
        )
        assert_bad_input(build(ws, "//p:t"), ws, "p/BUILD.marin", 2, f"extract_text 't': {message}")
