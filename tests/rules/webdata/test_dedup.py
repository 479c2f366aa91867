"""`dedup` (issue #29) as a sharded step: a map unit per input shard (its signatures), the
reduce in the driver, an apply unit per shard (its kept documents and cluster members) —
exact and near duplicates removed across shards and inputs, the clusters written out,
and only the units whose inputs changed run again."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

from conftest import CLI_TIMEOUT_S, build_json, cli_command, cli_env, run_cli, statuses

WORDS = (
    "the quick brown fox jumps over the lazy dog while the farmer walks slowly along the old stone road "
    "towards the market where merchants sell apples pears and fresh bread to the people of the small town "
    "who gather there every morning before the sun rises above the distant green hills of the valley"
).split()
PAGE = " ".join(WORDS)
NEAR = " ".join(["wolf" if word == "fox" else word for word in WORDS])  # one word of 50 changed
OTHER = "A river runs through the valley and the people of the town fish in it every day of the year."
THIRD = "The library opens at nine and closes at five, and the children read there after school."
VALIDATION = "Mountains rise over the northern plains, their peaks white with snow for most of the year."
NEW = "A new shard holds one document that no other shard has ever held in any of its lines."


def _shard(*texts: str) -> str:
    return "".join(json.dumps({"text": text}) + "\n" for text in texts)


BUILD = """
filegroup(name = "raw", srcs = glob(["corpus/**"]))
filegroup(name = "more", srcs = glob(["more/**"]))
dedup(name = "deduped", data = [":raw", ":more"], fuzzy = {{"ngram": {ngram}}})
"""

FILES = {
    "p/corpus/summary.json": "{}\n",
    "p/corpus/train/shard-00000.jsonl": _shard(PAGE, OTHER),
    "p/corpus/train/shard-00001.jsonl": _shard("  " + PAGE.replace(" ", "\n", 3), NEAR, THIRD),
    "p/corpus/validation/shard-00000.jsonl": _shard(VALIDATION),
    "p/more/summary.json": "{}\n",
    "p/more/train/shard-00000.jsonl": _shard(OTHER),
    "p/more/validation/shard-00000.jsonl": "",
}


def _workspace(make_workspace) -> Path:
    return make_workspace({"p/BUILD.marin": BUILD.format(ngram=5), **FILES}, 'rules = ["rules.webdata.decls"]\n')


def _units_run(store: Path, phase: str) -> list[str]:
    """The shards of every attempt at a unit of `phase` ("map_unit", "apply_unit"), sorted."""
    records = [json.loads(path.read_text()) for path in (store / "attempts").rglob("*.json")]
    return sorted(r["shard"] for r in records if r.get("impl") == f"rules.webdata.dedup:{phase}")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_dedup_removes_duplicates_across_shards_and_inputs_and_writes_the_clusters(make_workspace):
    ws = _workspace(make_workspace)
    store = ws / "cache"
    built = build_json(ws, "//p:deduped")
    assert statuses(built)["//p:deduped"] == "built", built["stderr"]
    out = Path(built["by_label"]["//p:deduped"]["output"])
    # The inputs' shards are numbered again, the first input's first.
    assert [d["text"] for d in _lines(out / "train" / "shard-00000.jsonl")] == [PAGE, OTHER]
    assert [d["text"] for d in _lines(out / "train" / "shard-00001.jsonl")] == [THIRD]
    assert _lines(out / "train" / "shard-00002.jsonl") == []  # OTHER again, from the second input
    assert [d["text"] for d in _lines(out / "validation" / "shard-00000.jsonl")] == [VALIDATION]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["documents"] == {"train": 3, "validation": 1}
    assert summary["shards"] == {"train": 3, "validation": 2}
    assert summary["removed"] == {"exact": 2, "near": 1, "paragraphs": 0, "emptied": 0}
    assert summary["clusters"]["clusters"] == 2
    first = _lines(out / "clusters" / "train" / "shard-00000.jsonl")
    assert [(m["text"], m["status"]) for m in first] == [(PAGE, "kept"), (OTHER, "kept")]
    page_cluster, other_cluster = first[0]["cluster"], first[1]["cluster"]
    second = _lines(out / "clusters" / "train" / "shard-00001.jsonl")
    assert [(m["cluster"], m["status"]) for m in second] == [
        (page_cluster, "exact duplicate"),
        (page_cluster, "near duplicate"),
    ]
    assert second[1]["text"] == NEAR and second[1]["id"] == "shard-00001.jsonl:2"
    [third] = _lines(out / "clusters" / "train" / "shard-00002.jsonl")
    assert (third["cluster"], third["status"]) == (other_cluster, "exact duplicate")
    shards = ["train/shard-00000.jsonl", "train/shard-00001.jsonl", "train/shard-00002.jsonl"]
    shards += ["validation/shard-00000.jsonl", "validation/shard-00001.jsonl"]
    assert _units_run(store, "map_unit") == shards
    assert _units_run(store, "apply_unit") == shards

    rebuilt = build_json(ws, "//p:deduped")
    assert set(statuses(rebuilt).values()) == {"cached"}
    assert len(_units_run(store, "map_unit")) == len(_units_run(store, "apply_unit")) == 5

    # A new shard of the second input: only it is mapped; the reduce runs again, and only
    # the shards whose decisions changed (the new one) are applied again.
    (ws / "p" / "more" / "train" / "shard-00001.jsonl").write_text(_shard(NEW, PAGE))
    added = build_json(ws, "//p:deduped")
    assert statuses(added)["//p:deduped"] == "built", added["stderr"]
    assert _units_run(store, "map_unit") == sorted(shards + ["train/shard-00003.jsonl"])
    assert _units_run(store, "apply_unit") == sorted(shards + ["train/shard-00003.jsonl"]), _units_run(
        store, "apply_unit"
    )
    out = Path(added["by_label"]["//p:deduped"]["output"])
    assert [d["text"] for d in _lines(out / "train" / "shard-00003.jsonl")] == [NEW]
    assert json.loads((out / "summary.json").read_text())["removed"]["exact"] == 3

    # A fuzzy parameter maps every shard again and copies nothing upstream; the decisions
    # stay the same, so no shard is applied again.
    (ws / "p" / "BUILD.marin").write_text(BUILD.format(ngram=4))
    changed = build_json(ws, "//p:deduped")
    assert statuses(changed) == {"//p:raw": "cached", "//p:more": "cached", "//p:deduped": "built"}
    assert len(_units_run(store, "map_unit")) == 12 and len(_units_run(store, "apply_unit")) == 6
    summary = json.loads((Path(changed["by_label"]["//p:deduped"]["output"]) / "summary.json").read_text())
    assert summary["config"]["fuzzy"]["ngram"] == 4 and summary["removed"]["near"] == 1


def test_paragraph_dedup_removes_paragraphs_seen_before(make_workspace):
    files = {
        "p/BUILD.marin": 'filegroup(name = "raw", srcs = glob(["corpus/**"]))\n'
        'dedup(name = "d", data = [":raw"], fuzzy = False, paragraphs = True)\n',
        "p/corpus/summary.json": "{}\n",
        "p/corpus/train/shard-00000.jsonl": _shard(f"{OTHER}\n\n{THIRD}"),
        "p/corpus/train/shard-00001.jsonl": _shard(f"{VALIDATION}\n\n{THIRD}", THIRD),
    }
    ws = make_workspace(files, 'rules = ["rules.webdata.decls"]\n')
    built = build_json(ws, "//p:d")
    assert statuses(built)["//p:d"] == "built", built["stderr"]
    out = Path(built["by_label"]["//p:d"]["output"])
    assert [d["text"] for d in _lines(out / "train" / "shard-00001.jsonl")] == [VALIDATION]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["removed"] == {"exact": 0, "near": 0, "paragraphs": 2, "emptied": 1}


def test_bad_dedup_parameters_are_errors_at_their_build_line(make_workspace):
    ws = make_workspace(
        {"p/BUILD.marin": 'dedup(name = "d", data = [":x"], fuzzy = {"bands": 2, "rows": 8})\n'},
        'rules = ["rules.webdata.decls"]\n',
    )
    rc, out, err = run_cli(ws, "build", "//p:d")
    assert rc == 2 and "p/BUILD.marin:1" in err and "2 bands of 8 rows" in err, err
    assert "Traceback" not in err and not (ws / "cache").exists()
    (ws / "p" / "BUILD.marin").write_text('dedup(name = "d", data = [":x"], fuzzy = {"ngrams": 3})\n')
    rc, out, err = run_cli(ws, "build", "//p:d")
    assert rc == 2 and "p/BUILD.marin:1" in err and "has no parameter 'ngrams'" in err, err
    (ws / "p" / "BUILD.marin").write_text('dedup(name = "d", data = [":x"], exact = False, fuzzy = False)\n')
    rc, out, err = run_cli(ws, "build", "//p:d")
    assert rc == 2 and "p/BUILD.marin:1" in err and "all off" in err, err
    for bad, says in (("0", "reduce_documents must be at least 1, got 0"), ('"many"', "reduce_documents")):
        (ws / "p" / "BUILD.marin").write_text(f'dedup(name = "d", data = [":x"], reduce_documents = {bad})\n')
        rc, out, err = run_cli(ws, "build", "//p:d")
        assert rc == 2 and "p/BUILD.marin:1" in err and says in err and "Traceback" not in err, err


# -- the reduce in units (reduce_documents) -------------------------------------------------


def _corpus(seed: int) -> dict[str, str]:
    """60 documents of 60 random words in 2 inputs of 2 shards each: a fifth copied exactly
    (with other whitespace), a fifth with one word changed, from anywhere in the corpus."""
    import random

    rng = random.Random(seed)
    vocabulary = [f"w{number}" for number in range(3000)]
    texts = [" ".join(rng.choices(vocabulary, k=60)) for _ in range(36)]
    for _ in range(12):
        texts.append("  " + rng.choice(texts).replace(" ", "\n", 2))
    for _ in range(12):
        words = rng.choice(texts).split()
        words[rng.randrange(len(words))] = "changed"
        texts.append(" ".join(words))
    rng.shuffle(texts)
    files = {}
    for index, name in enumerate(["corpus/train/shard-00000", "corpus/train/shard-00001", "more/train/shard-00000"]):
        files[f"p/{name}.jsonl"] = _shard(*texts[index * 20 : (index + 1) * 20])
    return {**files, "p/corpus/summary.json": "{}\n", "p/more/summary.json": "{}\n"}


def _units_workspace(make_workspace, reduce_documents: int | None) -> Path:
    setting = f", reduce_documents = {reduce_documents}" if reduce_documents else ""
    build = (
        'filegroup(name = "raw", srcs = glob(["corpus/**"]))\n'
        'filegroup(name = "more", srcs = glob(["more/**"]))\n'
        f'dedup(name = "deduped", data = [":raw", ":more"]{setting})\n'
    )
    return make_workspace({"p/BUILD.marin": build, **_corpus(5)}, 'rules = ["rules.webdata.decls"]\n')


def _tree(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_the_reduce_in_units_writes_the_same_output_as_the_reduce_in_the_driver(make_workspace):
    """reduce_documents = 8 reduces the 60 documents in waves of units (8 document ranges):
    the same bytes, under the same key, as the reduce in the driver; a rebuild runs nothing."""
    whole = _units_workspace(make_workspace, None)
    parts = _units_workspace(make_workspace, 8)
    expected = build_json(whole, "//p:deduped")
    built = build_json(parts, "//p:deduped")
    assert statuses(built)["//p:deduped"] == "built", built["stderr"]
    assert built["by_label"]["//p:deduped"]["key"] == expected["by_label"]["//p:deduped"]["key"]
    output = Path(built["by_label"]["//p:deduped"]["output"])
    assert _tree(output) == _tree(Path(expected["by_label"]["//p:deduped"]["output"]))
    summary = json.loads((output / "summary.json").read_text())
    assert summary["removed"]["exact"] >= 12 and summary["removed"]["near"] >= 6, summary
    reduced = _units_run(parts / "cache", "reduce_unit")
    assert not _units_run(whole / "cache", "reduce_unit")
    assert {name.split()[2] for name in reduced if name.startswith("round")} >= {
        "bucket",
        "pairs",
        "attach",
        "verify",
        "large_star",
        "small_star",
    }
    assert len([name for name in reduced if name.startswith("decide")]) == 3  # one per shard
    rebuilt = build_json(parts, "//p:deduped")
    assert set(statuses(rebuilt).values()) == {"cached"}
    assert _units_run(parts / "cache", "reduce_unit") == reduced


def test_the_reduce_in_units_on_a_ray_cluster_writes_the_same_output(make_workspace, ray_cluster):
    whole = _units_workspace(make_workspace, None)
    parts = _units_workspace(make_workspace, 8)
    expected = build_json(whole, "//p:deduped")
    built = build_json(parts, "--executor", "ray", "--ray-address", ray_cluster, "//p:deduped")
    assert statuses(built)["//p:deduped"] == "built", built["stderr"]
    output = Path(built["by_label"]["//p:deduped"]["output"])
    assert _tree(output) == _tree(Path(expected["by_label"]["//p:deduped"]["output"]))
    records = _records(parts / "cache", "reduce_unit")
    assert records and {record["executor"] for record in records} == {"ray"}
    # A unit reads the units before it by their keys: none of their files went through the
    # store's blobs (the way a file the driver made itself reaches a host elsewhere).
    read = {item["blake3"] for record in records for item in record["inputs"].values()}
    blobs = {path.name for path in (parts / "cache" / "blobs").rglob("*") if path.is_file()}
    assert read and not read & blobs, sorted(read & blobs)[:3]


def _records(store: Path, phase: str) -> list[dict]:
    records = [json.loads(path.read_text()) for path in (store / "attempts").rglob("*.json")]
    return [r for r in records if r.get("impl") == f"rules.webdata.dedup:{phase}"]


def test_a_build_killed_in_the_reduce_resumes_with_the_units_it_finished(make_workspace):
    ws = _units_workspace(make_workspace, 8)
    store = ws / "cache"
    builder = subprocess.Popen(
        cli_command(ws, "build", "//p:deduped"), cwd=ws, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + CLI_TIMEOUT_S
    try:
        while len([r for r in _records(store, "reduce_unit") if r.get("status") == "succeeded"]) < 12:
            assert builder.poll() is None and time.monotonic() < deadline, builder.communicate()
            time.sleep(0.02)
    finally:
        builder.send_signal(signal.SIGKILL)
        builder.communicate()
    finished = {r["shard"] for r in _records(store, "reduce_unit") if r.get("status") == "succeeded"}
    before = {r["attempt"] for r in _records(store, "reduce_unit")}
    resumed = build_json(ws, "//p:deduped")
    assert statuses(resumed)["//p:deduped"] == "built", resumed["stderr"]
    again = {r["shard"] for r in _records(store, "reduce_unit") if r["attempt"] not in before}
    assert again and not again & finished, (sorted(again & finished), len(finished))
    summary = json.loads((Path(resumed["by_label"]["//p:deduped"]["output"]) / "summary.json").read_text())
    assert summary["removed"]["exact"] >= 12, summary
