"""A data step's counts (issue #29): `marinbuild show` prints what each filter saw, kept and
rejected, by reason, and the inputs skipped; `marinbuild report` tabulates them."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

from conftest import build_json, run_cli

from marinbuild.provenance.data_counts import data_counts

GOOD = "The cat sat on the mat and looked at the birds that flew over the garden wall today."
SHORT = "far too short"
BUILD = """
filegroup(name = "raw", srcs = glob(["corpus/**"]))
filter_text(
    name = "filtered",
    data = ":raw",
    filters = [{"name": "gopher_quality", "min_words": 5}, {"name": "c4_quality", "min_sentences": 2}],
)
"""


def _shard(*texts: str) -> str:
    return "".join(json.dumps({"text": text}) + "\n" for text in texts)


def _workspace(make_workspace) -> Path:
    files = {
        "p/BUILD.marin": BUILD,
        "p/corpus/summary.json": "{}\n",
        "p/corpus/train/shard-00000.jsonl": _shard(GOOD, SHORT, SHORT, GOOD + " " + GOOD) + "not json\n",
        "p/corpus/validation/shard-00000.jsonl": _shard(GOOD + " " + GOOD),
    }
    ws = make_workspace(files, 'rules = ["rules.webdata.decls"]\n')
    build_json(ws, "//p:filtered")
    return ws


def test_show_prints_each_filter_s_counts_and_the_skips(make_workspace):
    ws = _workspace(make_workspace)
    rc, out, err = run_cli(ws, "show", "//p:filtered")
    assert rc == 0, err
    lines = out.splitlines()
    start = lines.index("  filters, in order (each sees what those before it kept)")
    assert lines[start - 1] == "  documents    2 (train 1, validation 1)"
    assert lines[start + 1].split() == "gopher_quality seen 5 kept 3 (60.0%) rejected 2: too few words 2".split()
    assert lines[start + 2].split() == "c4_quality seen 3 kept 2 (66.7%) rejected 1: too few sentences 1".split()
    assert lines[start + 3] == "  skipped      1 inputs passed over"
    assert lines[start + 4].split() == "not json 1 first at train/shard-00000.jsonl:5".split()
    assert not any(line.startswith("    filters:") for line in lines)  # not again as a raw metric
    # --json keeps the summary as it is.
    rc, out, _ = run_cli(ws, "show", "--json", "//p:filtered")
    assert json.loads(out)["metrics"]["filters"][0]["reasons"] == {"too few words": 2}


def _cells(html: str, table_id: str) -> list[list[str]]:
    table = re.search(rf'<table id="{table_id}">(.*?)</table>', html, re.S)
    assert table, table_id
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)[1:]  # the header row left out
    return [[unescape(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)] for row in rows]


def test_the_report_tabulates_each_filter_s_counts_and_the_skips(make_workspace, tmp_path):
    ws = _workspace(make_workspace)
    rc, out, err = run_cli(ws, "report", "//p:filtered", "-o", str(tmp_path / "report"))
    assert rc == 0, err
    [page] = (tmp_path / "report" / "steps").glob("p_filtered-*.html")
    html = page.read_text()
    assert "<p>2 documents (train 1, validation 1).</p>" in html
    assert _cells(html, "filters-table") == [
        ["gopher_quality", "5", "3", "60", "2", "too few words 2"],
        ["c4_quality", "3", "2", "66.7", "1", "too few sentences 1"],
    ]
    assert _cells(html, "skipped-table") == [["not json", "1", "train/shard-00000.jsonl:5"]]


def test_other_metrics_are_no_data_counts():
    assert data_counts({"loss": 2.5, "steps": 100}) is None
    assert data_counts({"documents": {"train": 3}, "filters": "all"}) is None
    counts = data_counts({"documents": {"train": 10, "validation": 1}, "tokens": {"train": 900}})
    assert counts is not None and counts.total_documents == 11 and not counts.filters and not counts.skipped
