"""`filter_text` (issue #29): a filter chain over a corpus as a sharded step — each shard
filtered under a key of its own, the rejected documents kept beside the output with the
filter that rejected them, and the counts of every filter in summary.json."""

from __future__ import annotations

import json
import math
import random
import re
from html import unescape
from pathlib import Path

from conftest import build_json, run_cli, statuses

from rules.webdata.blocks.score_distribution import BINS, distribution, score_histogram, score_range

GOOD = [
    "The cat sat on the mat and looked at the birds that flew over the garden wall.",
    "A river runs through the valley and the people of the town fish in it every day.",
    "The library opens at nine and closes at five, and the children read there after school.",
]
SHORT = "far too short"


def _shard(*texts: str) -> str:
    return "".join(json.dumps({"text": text}) + "\n" for text in texts)


BUILD = """
filegroup(name = "raw", srcs = glob(["corpus/**"]))
filter_text(
    name = "filtered",
    data = ":raw",
    filters = [{{"name": "gopher_quality", "min_words": {min_words}}}, {{"name": "c4_quality", "min_sentences": 1}}],
)
"""

CORPUS = {
    "p/corpus/summary.json": "{}\n",
    "p/corpus/train/shard-00000.jsonl": _shard(GOOD[0], SHORT),
    "p/corpus/train/shard-00001.jsonl": _shard(GOOD[1]) + "not json\n",
    "p/corpus/validation/shard-00000.jsonl": _shard(GOOD[2]),
}


def _workspace(make_workspace, min_words: int = 5) -> Path:
    files = {"p/BUILD.marin": BUILD.format(min_words=min_words), **CORPUS}
    return make_workspace(files, 'rules = ["rules.webdata.decls"]\n')


def _units_run(store: Path) -> list[str]:
    """The shards of every unit attempt in the store, sorted (each time a unit ran)."""
    records = [json.loads(path.read_text()) for path in (store / "attempts").rglob("*.json")]
    return sorted(record["shard"] for record in records if "shard" in record)


def _texts(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text().splitlines()]


def test_filter_text_filters_each_shard_once_and_keeps_what_it_rejected(make_workspace):
    ws = _workspace(make_workspace)
    store = ws / "cache"
    built = build_json(ws, "//p:filtered")
    assert statuses(built) == {"//p:raw": "built", "//p:filtered": "built"}, built["stderr"]
    out = Path(built["by_label"]["//p:filtered"]["output"])
    assert _texts(out / "train" / "shard-00000.jsonl") == [GOOD[0]]
    assert _texts(out / "validation" / "shard-00000.jsonl") == [GOOD[2]]
    [rejected] = [
        json.loads(line) for line in (out / "rejected" / "train" / "shard-00000.jsonl").read_text().splitlines()
    ]
    assert (
        rejected["text"] == SHORT and rejected["filter"] == "gopher_quality" and rejected["id"] == "shard-00000.jsonl:2"
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["documents"] == {"train": 2, "validation": 1}
    assert summary["shards"] == {"train": 2, "validation": 1}
    quality, c4 = summary["filters"]
    assert (quality["name"], quality["seen"], quality["kept"], quality["rejected"]) == ("gopher_quality", 4, 3, 1)
    assert (c4["name"], c4["min_sentences"], c4["seen"], c4["kept"]) == ("c4_quality", 1, 3, 3)
    assert summary["skipped"] == {"not json": {"count": 1, "first": "train/shard-00001.jsonl:2"}}
    assert _units_run(store) == ["train/shard-00000.jsonl", "train/shard-00001.jsonl", "validation/shard-00000.jsonl"]

    assert set(statuses(build_json(ws, "//p:filtered")).values()) == {"cached"}
    # A new shard is the only one filtered.
    (ws / "p" / "corpus" / "train" / "shard-00002.jsonl").write_text(_shard(GOOD[2], SHORT))
    added = build_json(ws, "//p:filtered")
    assert statuses(added) == {"//p:raw": "built", "//p:filtered": "built"}
    assert _units_run(store).count("train/shard-00002.jsonl") == 1 and len(_units_run(store)) == 4
    summary = json.loads((Path(added["by_label"]["//p:filtered"]["output"]) / "summary.json").read_text())
    assert summary["documents"] == {"train": 3, "validation": 1}

    # A filter's parameter filters every shard again, and copies nothing upstream.
    (ws / "p" / "BUILD.marin").write_text(BUILD.format(min_words=3))
    changed = build_json(ws, "//p:filtered")
    assert statuses(changed) == {"//p:raw": "cached", "//p:filtered": "built"}
    assert len(_units_run(store)) == 8
    out = Path(changed["by_label"]["//p:filtered"]["output"])
    [rejected] = [
        json.loads(line) for line in (out / "rejected" / "train" / "shard-00000.jsonl").read_text().splitlines()
    ]
    assert rejected["text"] == SHORT and rejected["reason"] != "too few words"  # 3 words are enough now


def test_a_bad_filter_is_an_error_at_its_build_line(make_workspace):
    ws = make_workspace(
        {
            "p/BUILD.marin": 'filter_text(name = "f", data = ":x", filters = [{"name": "gopher_qualty"}])\n',
        },
        'rules = ["rules.webdata.decls"]\n',
    )
    rc, out, err = run_cli(ws, "build", "//p:f")
    assert rc == 2 and "p/BUILD.marin:1" in err and "unknown filter 'gopher_qualty'" in err, err
    assert "Traceback" not in err and not (ws / "cache").exists()


def _refinedweb_row(index: int) -> str:
    """A line in the shape Falcon RefinedWeb's rows have: the text under `content`."""
    row = {
        "content": GOOD[index % len(GOOD)],
        "url": f"https://example.org/page/{index}",
        "timestamp": "2023-01-29T12:00:00",
        "dump": "CC-MAIN-2023-06",
        "segment": "1674764494826.88",
        "image_urls": [],
    }
    return json.dumps(row) + "\n"


def test_input_without_one_readable_line_fails_the_step_instead_of_publishing_nothing(make_workspace):
    files = {
        "p/BUILD.marin": BUILD.format(min_words=5),
        "p/corpus/summary.json": "{}\n",
        "p/corpus/train/shard-00000.jsonl": "".join(_refinedweb_row(index) for index in range(3)),
        "p/corpus/validation/shard-00000.jsonl": (
            json.dumps({"text": "café au lait"}, ensure_ascii=False) + "\n"
        ).encode("latin-1"),
    }
    ws = make_workspace(files, 'rules = ["rules.webdata.decls"]\n')
    failed = build_json(ws, "//p:filtered", expect_rc=1)
    result = failed["by_label"]["//p:filtered"]
    assert result["status"] == "failed" and result["output"] is None, result
    reason = result["reason"]
    assert reason.startswith("no readable line in the 2 shards of //p:raw: "), reason
    assert "'no string text': {'count': 3, 'first': 'train/shard-00000.jsonl:1'}" in reason
    assert "'invalid utf-8': {'count': 1, 'first': 'validation/shard-00000.jsonl:1'}" in reason
    assert "Traceback" not in failed["stderr"]


# -- where a threshold falls ----------------------------------------------------------------------

SCORED_BUILD = """
filegroup(name = "raw", srcs = glob(["corpus/**"]))
filter_text(name = "cut", data = ":raw", filters = [{{"name": "quality_threshold", "threshold": {threshold}}}])
"""
# Thirty documents scored 0.61 to 0.813, in three shards of two splits, in no order.
SCORES = random.Random(0).sample([round(0.61 + 0.007 * index, 4) for index in range(30)], 30)
SCORED_SHARDS = {"train/shard-00000.jsonl": SCORES[:12], "train/shard-00001.jsonl": SCORES[12:24]}
SCORED_SHARDS["validation/shard-00000.jsonl"] = SCORES[24:]


def _scored_workspace(make_workspace, threshold: float) -> Path:
    files = {"p/BUILD.marin": SCORED_BUILD.format(threshold=threshold), "p/corpus/summary.json": "{}\n"}
    for name, scores in SCORED_SHARDS.items():
        files[f"p/corpus/{name}"] = "".join(
            json.dumps({"text": f"document {score}", "metadata": {"quality_score": score}}) + "\n" for score in scores
        )
    return make_workspace(files, 'rules = ["rules.webdata.decls"]\n')


def test_a_threshold_s_distribution_is_recorded_shown_and_drawn(make_workspace, tmp_path):
    ws = _scored_workspace(make_workspace, 0.7)
    built = build_json(ws, "//p:cut")
    assert "WARNING" not in built["stderr"], built["stderr"]
    summary = json.loads((Path(built["by_label"]["//p:cut"]["output"]) / "summary.json").read_text())
    kept = sum(score >= 0.7 for score in SCORES)
    assert summary["documents"]["train"] + summary["documents"]["validation"] == kept == 17
    # The three units' histograms, added up, are the histogram of every document.
    direct = distribution("quality_score", [score_histogram(SCORES)], [score_range(SCORES)], 0.7, kept)
    assert direct is not None and summary["distributions"] == [direct.to_json()]
    [found] = summary["distributions"]
    assert (found["count"], found["min"], found["max"], found["threshold"]) == (30, 0.61, 0.813, 0.7)
    ordered = sorted(SCORES)
    for fraction, value in found["quantiles"]:  # nearest rank, to half a bin of 1/65536
        assert abs(value - ordered[math.ceil(fraction * 30) - 1]) <= 0.5 / BINS, (fraction, value)
    edges, counts = found["histogram"]["edges"], found["histogram"]["counts"]
    assert sum(counts) == 30 and edges[0] <= 0.61 and edges[-1] > 0.813 and len(counts) <= 64

    rc, out, err = run_cli(ws, "show", "//p:cut")
    assert rc == 0, err
    lines = out.splitlines()
    start = lines.index("  distributions (of what the step cut on)")
    shown = (
        "30 values: min 0.61, p10 0.62, p25 0.66, median 0.71, p75 0.76, p90 0.79, max 0.81; "
        "threshold 0.7 keeps 17 of 30 (56.7%)"
    )
    assert lines[start + 1] == f"    quality_score  {shown}"
    bars = lines[start + 2].split()
    assert bars[0] == f"{edges[0]:.2f}" and bars[-1] == f"{edges[-1]:.2f}" and "|" in lines[start + 2]
    assert not any(line.startswith("    distributions:") for line in lines)  # not again as a raw metric

    rc, out, err = run_cli(ws, "report", "//p:cut", "-o", str(tmp_path / "report"))
    assert rc == 0, err
    [page] = (tmp_path / "report" / "steps").glob("p_cut-*.html")
    html = page.read_text()
    figure = re.search(
        r'<h2 id="distributions">.*?<figure class="distribution">(<svg.*?</svg>)\s*<figcaption>(.*?)<', html, re.S
    )
    assert figure, html
    assert "threshold 0.7 keeps 17 of 30 (56.7%)" in figure.group(1)  # the threshold line's legend
    assert unescape(figure.group(2)) == f"quality_score: {shown}"


def test_a_threshold_that_keeps_all_or_none_is_a_warning(make_workspace):
    ws = _scored_workspace(make_workspace, 0.5)
    built = build_json(ws, "//p:cut")
    warning = "WARNING: //p:cut: the threshold 0.5 on quality_score keeps all of 30 (they lie in 0.61–0.81)"
    assert warning in built["stderr"], built["stderr"]
    # Keeping none: the warning, then the step's failure (nothing is left to publish).
    (ws / "p" / "BUILD.marin").write_text(SCORED_BUILD.format(threshold=0.9))
    rc, out, err = run_cli(ws, "build", "//p:cut")
    warning = "WARNING: //p:cut: the threshold 0.9 on quality_score keeps none of 30 (they lie in 0.61–0.81)"
    assert rc == 1 and warning in err, err
    assert err.index(warning) < err.index("failed //p:cut"), err
