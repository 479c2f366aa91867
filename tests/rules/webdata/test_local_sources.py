"""Raw data as steps (issue #29): `synthetic_web_pages` (WARC files of generated pages and
their ground truth) and `translated_phrases` (humanize's catalogs as a non-English corpus)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import build_json, run_cli, statuses
from helpers_workspace import assert_bad_input, build

from rules.webdata.blocks.raw_corpus.pages import RawCorpusSpec
from rules.webdata.blocks.raw_corpus.pool import translations
from rules.webdata.blocks.raw_corpus.warc import GROUND_TRUTH, write_raw_corpus

RULES = 'rules = ["rules.webdata.decls"]\n'
PAGES = """
synthetic_web_pages(
    name = "pages",
    pages = 60,
    pages_per_file = 25,
    seed = 3,
    stdlib_modules = 2,
    non_english_rate = {non_english_rate},
)
"""


def test_synthetic_web_pages_are_the_generator_s_bytes_and_built_once(make_workspace, tmp_path):
    ws = make_workspace({"p/BUILD.marin": PAGES.format(non_english_rate=0.1)}, RULES)
    built = build_json(ws, "//p:pages")
    out = Path(built["by_label"]["//p:pages"]["output"])
    spec = RawCorpusSpec(pages=60, pages_per_file=25, seed=3, stdlib_modules=2, non_english_rate=0.1)
    written = write_raw_corpus(spec, tmp_path / "direct")
    assert sorted(path.name for path in (out / "warc").iterdir()) == list(written.files)
    for name in written.files:
        assert (out / "warc" / name).read_bytes() == (tmp_path / "direct" / "warc" / name).read_bytes()
    assert (out / GROUND_TRUTH).read_bytes() == (tmp_path / "direct" / GROUND_TRUTH).read_bytes()
    summary = json.loads((out / "summary.json").read_text())
    assert summary == {"pages": 60, "kinds": written.kinds, "files": list(written.files), "bytes": written.bytes}
    assert summary["kinds"]["non_english"] > 0

    assert statuses(build_json(ws, "//p:pages")) == {"//p:pages": "cached"}
    (ws / "p" / "BUILD.marin").write_text(PAGES.format(non_english_rate=0.0))
    assert statuses(build_json(ws, "//p:pages")) == {"//p:pages": "built"}


def test_a_bad_spec_is_an_error_at_its_build_line(make_workspace):
    ws = make_workspace({"p/BUILD.marin": PAGES.format(non_english_rate=1.5)}, RULES)
    assert_bad_input(
        build(ws, "//p:pages"),
        ws,
        "p/BUILD.marin",
        2,
        "synthetic_web_pages 'pages': non_english_rate must be between 0 and 1",
    )
    ws = make_workspace({"p/BUILD.marin": 'synthetic_web_pages(name = "pages", pages = "many")\n'}, RULES)
    assert_bad_input(build(ws, "//p:pages"), ws, "p/BUILD.marin", 1, "synthetic_web_pages 'pages': attribute 'pages'")


def test_translated_phrases_is_a_corpus_of_humanize_s_catalogs(make_workspace):
    ws = make_workspace(
        {"p/BUILD.marin": 'translated_phrases(name = "de", locales = ["de_DE"], phrases_per_document = 4)\n'}, RULES
    )
    out = Path(build_json(ws, "//p:de")["by_label"]["//p:de"]["output"])
    texts = [json.loads(line)["text"] for shard in sorted(out.glob("*/shard-*.jsonl")) for line in shard.open()]
    assert not any("%" in text for text in texts)
    assert all(text.count(". ") <= 3 for text in texts)  # 4 phrases a document
    phrases = {phrase for text in texts for phrase in text.removesuffix(".").split(". ")}
    assert {"Stunde", "ein Jahr", "gestern", "vor"} <= phrases
    assert len(texts) * 4 >= len({phrase for phrase in dict(translations())["de_DE"] if "%" not in phrase}) - 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["source"] == {"humanize_locales": ["de_DE"], "phrases_per_document": 4}

    (ws / "p" / "BUILD.marin").write_text('translated_phrases(name = "de", locales = ["klingon"])\n')
    rc, _, err = run_cli(ws, "build", "//p:de")
    assert rc == 1 and "humanize has no catalog for klingon" in err and "Traceback" not in err, err
