"""`train_quality_classifier` and `score_quality` (issue #29): a real fastText classifier
trained as a plain step on two corpora, then a corpus scored shard by shard (each score
kept in the document's metadata) and cut at a threshold or at the top fraction of all
shards' scores; changing the cut scores nothing again, adding a shard scores only it."""

from __future__ import annotations

import json
import random
from pathlib import Path

from conftest import build_json, run_cli, statuses

from rules.webdata.blocks.score_distribution import distribution, score_histogram, score_range

PROSE = (
    "the river flows through the quiet valley where farmers grow wheat and barley near the old mill "
    "children walk to school along the road and the teacher reads them stories about distant lands"
).split()
LINKS = ["Read more", "See also", "Related", "Top post", "Click here", "Subscribe now"]
GOOD = [
    "The teacher reads stories to the children near the old mill in the valley.",
    "Farmers grow wheat along the river and walk the road to the quiet school.",
]
BAD = [
    "Click here: page-3.html\nSubscribe now: page-9.html\nTop post: page-1.html",
    "Read more: page-7.html\nSee also: page-2.html\nRelated: page-5.html",
]


def _shard(*texts: str) -> str:
    return "".join(json.dumps({"text": text}) + "\n" for text in texts)


def _training_files() -> dict[str, str]:
    rng = random.Random(0)
    good = [" ".join(rng.choice(PROSE) for _ in range(30)) + "." for _ in range(60)]
    bad = ["\n".join(f"{rng.choice(LINKS)}: page-{rng.randrange(100)}.html" for _ in range(8)) for _ in range(60)]
    return {
        "p/good/summary.json": "{}\n",
        "p/good/train/shard-00000.jsonl": _shard(*good),
        "p/bad/summary.json": "{}\n",
        "p/bad/train/shard-00000.jsonl": _shard(*bad),
    }


BUILD = """
filegroup(name = "good", srcs = glob(["good/**"]))
filegroup(name = "bad", srcs = glob(["bad/**"]))
filegroup(name = "web", srcs = glob(["web/**"]))
train_quality_classifier(
    name = "classifier",
    positive = ":good",
    negative = ":bad",
    hyperparameters = {{"epoch": 10, "dim": 16, "bucket": 524288}},
)
score_quality(name = "scored", data = ":web", classifier = ":classifier", {cut})
"""

WEB = {
    "p/web/summary.json": "{}\n",
    "p/web/train/shard-00000.jsonl": _shard(GOOD[0], BAD[0]),
    "p/web/train/shard-00001.jsonl": _shard(BAD[1], GOOD[1]) + "not json\n",
}
RULES = 'rules = ["rules.webdata.decls"]\n'


def _units_run(store: Path, phase: str) -> list[str]:
    records = [json.loads(path.read_text()) for path in (store / "attempts").rglob("*.json")]
    return sorted(r["shard"] for r in records if r.get("impl") == f"rules.webdata.score_quality:{phase}")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_score_quality_keeps_scores_and_cuts_without_scoring_again(make_workspace):
    files = {"p/BUILD.marin": BUILD.format(cut="threshold = 0.5"), **_training_files(), **WEB}
    ws = make_workspace(files, RULES)
    store = ws / "cache"
    built = build_json(ws, "//p:scored")
    assert statuses(built)["//p:scored"] == "built", built["stderr"]
    model = Path(built["by_label"]["//p:classifier"]["output"])
    trained = json.loads((model / "summary.json").read_text())
    assert (trained["positive"], trained["negative"]) == (60, 60) and (model / "model.bin").is_file()
    out = Path(built["by_label"]["//p:scored"]["output"])
    kept = _lines(out / "train" / "shard-00000.jsonl") + _lines(out / "train" / "shard-00001.jsonl")
    assert [d["text"] for d in kept] == GOOD
    assert all(d["metadata"]["quality_score"] >= 0.5 for d in kept)
    [rejected] = _lines(out / "rejected" / "train" / "shard-00000.jsonl")
    assert rejected["text"] == BAD[0] and rejected["metadata"]["quality_score"] < 0.5
    assert rejected["reason"] == "quality below threshold"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["documents"] == {"train": 2, "validation": 0} and summary["rejected"]["train"] == 2
    assert summary["skipped"] == {"not json": {"count": 1, "first": "train/shard-00001.jsonl:3"}}
    two = ["train/shard-00000.jsonl", "train/shard-00001.jsonl"]
    assert _units_run(store, "score_unit") == _units_run(store, "cut_unit") == two

    assert set(statuses(build_json(ws, "//p:scored")).values()) == {"cached"}

    # The top half of the corpus by score: the same documents, cut again, not scored again.
    (ws / "p" / "BUILD.marin").write_text(BUILD.format(cut="top_fraction = 0.5"))
    top = build_json(ws, "//p:scored")
    assert statuses(top)["//p:classifier"] == "cached" and statuses(top)["//p:scored"] == "built", top["stderr"]
    assert _units_run(store, "score_unit") == two and _units_run(store, "cut_unit") == sorted(two * 2)
    out = Path(top["by_label"]["//p:scored"]["output"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["documents"]["train"] == 2 and 0 < summary["threshold"] <= min(
        d["metadata"]["quality_score"] for d in kept
    )

    # A new shard is the only one scored.
    (ws / "p" / "web" / "train" / "shard-00002.jsonl").write_text(_shard(GOOD[0]))
    added = build_json(ws, "//p:scored")
    assert statuses(added)["//p:scored"] == "built", added["stderr"]
    assert _units_run(store, "score_unit") == sorted(two + ["train/shard-00002.jsonl"])


def test_bad_quality_attrs_are_errors_at_their_build_line(make_workspace):
    files = {"p/BUILD.marin": BUILD.format(cut="threshold = 0.5, top_fraction = 0.1"), **_training_files(), **WEB}
    ws = make_workspace(files, RULES)
    rc, out, err = run_cli(ws, "build", "//p:scored")
    assert rc == 2 and "p/BUILD.marin:11" in err and "either threshold or top_fraction" in err, err
    (ws / "p" / "BUILD.marin").write_text(BUILD.format(cut="top_fraction = 1.5"))
    rc, out, err = run_cli(ws, "build", "//p:scored")
    assert rc == 2 and "p/BUILD.marin:11" in err and "top_fraction must be above 0" in err, err
    (ws / "p" / "BUILD.marin").write_text(BUILD.format(cut="threshold = 0.5").replace('"dim": 16', '"dim": 2'))
    rc, out, err = run_cli(ws, "build", "//p:scored")
    assert rc == 2 and "p/BUILD.marin:5" in err and "bucket x dim" in err, err
    assert "Traceback" not in err and not (ws / "cache").exists()


def test_the_scores_distribution_is_shown_and_a_threshold_that_does_not_cut_warns(make_workspace):
    web = {**WEB, "p/web/validation/shard-00000.jsonl": _shard(GOOD[1], BAD[0])}
    ws = make_workspace({"p/BUILD.marin": BUILD.format(cut="threshold = 0.5"), **_training_files(), **web}, RULES)
    built = build_json(ws, "//p:scored")
    assert statuses(built)["//p:scored"] == "built" and "WARNING" not in built["stderr"], built["stderr"]
    out = Path(built["by_label"]["//p:scored"]["output"])
    kept = [d["metadata"]["quality_score"] for shard in out.glob("*/shard-*.jsonl") for d in _lines(shard)]
    rejected = [d["metadata"]["quality_score"] for shard in out.glob("rejected/*/*.jsonl") for d in _lines(shard)]
    scores = kept + rejected
    assert len(kept) == len(rejected) == 3 and max(scores) - min(scores) > 0.1 and max(scores) < 1, scores
    # What the three score units counted, added up, is what all six documents give.
    everything = distribution("quality_score", [score_histogram(scores)], [score_range(scores)], 0.5, 3)
    summary = json.loads((out / "summary.json").read_text())
    assert everything is not None and summary["distributions"] == [everything.to_json()]

    rc, shown, err = run_cli(ws, "show", "//p:scored")
    assert rc == 0, err
    lines = shown.splitlines()
    line = lines[lines.index("  distributions (of what the step cut on)") + 1]
    assert line.startswith(f"    quality_score  6 values: min {min(scores):.2f}, p10 "), line
    assert line.endswith(f", max {max(scores):.2f}; threshold 0.5 keeps 3 of 6 (50.0%)"), line

    span = f"(they lie in {min(scores):.2f}–{max(scores):.2f})"
    (ws / "p" / "BUILD.marin").write_text(BUILD.format(cut="threshold = 0"))
    everything_kept = build_json(ws, "//p:scored")
    assert statuses(everything_kept)["//p:scored"] == "built", everything_kept["stderr"]
    warning = f"WARNING: //p:scored: the threshold 0 on quality_score keeps all of 6 {span}"
    assert warning in everything_kept["stderr"], everything_kept["stderr"]
    (ws / "p" / "BUILD.marin").write_text(BUILD.format(cut="threshold = 1"))
    rc, _, err = run_cli(ws, "build", "//p:scored")
    warning = f"WARNING: //p:scored: the threshold 1 on quality_score keeps none of 6 {span}"
    assert rc == 1 and warning in err and err.index(warning) < err.index("failed //p:scored"), err
    # A top fraction keeps what it was asked to: no warning.
    (ws / "p" / "BUILD.marin").write_text(BUILD.format(cut="top_fraction = 1.0"))
    everything_asked = build_json(ws, "//p:scored")
    assert statuses(everything_asked)["//p:scored"] == "built" and "WARNING" not in everything_asked["stderr"]
