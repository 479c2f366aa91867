"""Sharded steps (issue #29): each shard of a step's input is a unit of work with a key of
its own, made of the unit's parameters and the content of its shard, so that adding a
file runs only its unit, a killed build resumes with the units it published, and a
parameter reruns every unit of its step but nothing upstream.

A toy sharded rule stands for the text rules here: `tag_docs` appends a suffix to every
document of every JSONL file of its inputs, one unit per file, and each unit appends its
name to `units.log` in the workspace when it runs, so that a test counts what ran.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import (
    CLI_TIMEOUT_S,
    attempt_records,
    build_json,
    cli_command,
    cli_env,
    entry_path,
    keys,
    run_cli,
    statuses,
)

from marinbuild.hashing import digest_file

RULES = '''
import json
import os
import time
from pathlib import Path

from marinbuild.targets import Attr, Resources, Rule, ShardUnit
from marinbuild.targets import attrs as types
from marinbuild.targets.context import StepFailed


def tag_shard(ctx):
    """One unit: the documents of one JSONL shard, each with the suffix appended."""
    runner = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\\0")[0].decode()
    with open(ctx.workspace / "units.log", "a") as log:
        log.write(f"{ctx.label}\\t{runner}\\n")
    documents = []
    with open(ctx.location("shard"), encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            try:
                documents.append(json.loads(line)["text"])
            except (ValueError, KeyError, TypeError) as error:
                raise StepFailed(f"line {number}: not a JSON line with a text field ({error})") from None
            ctx.progress(number, None, "docs")
    for text in documents:
        if text == "die once" and not (ctx.workspace / "died").exists():
            (ctx.workspace / "died").write_text("")
            os.kill(os.getpid(), 9)  # as the kernel's OOM killer would
        if text == "explode":
            raise RuntimeError("a document that breaks the unit")
        while text == "wait" and (ctx.workspace / "HOLD").exists():
            time.sleep(0.05)
    with open(ctx.out / "docs.jsonl", "w", encoding="utf-8") as out:
        for text in documents:
            out.write(json.dumps({"text": text + ctx.attrs["suffix"]}) + "\\n")
    (ctx.out / "counts.json").write_text(json.dumps({"documents": len(documents)}))
    ctx.measure(documents=len(documents))


def _tag_docs(ctx):
    """The driver: a unit per JSONL file of the inputs, then their outputs at the files' names."""
    units = []
    for label in ctx.attrs["data"]:
        root = ctx.root(label)
        for path in ctx.files(label):
            if path.suffix == ".jsonl":
                name = label.rpartition(":")[2] if path == root else path.relative_to(root).as_posix()
                units.append(ShardUnit(name, {"shard": path}, {"suffix": ctx.attrs["suffix"]}))
    results = ctx.map_shards("toyshards:tag_shard", units)
    for result in results:
        result.place("docs.jsonl", ctx.out / result.name)
    documents = sum(result.read_json("counts.json")["documents"] for result in results)
    summary = {"documents": documents, "shards": len(results)}
    (ctx.out / "summary.json").write_text(json.dumps(summary, sort_keys=True))


tag_docs = Rule(
    name="tag_docs",
    impl=_tag_docs,
    attrs={"data": Attr(types.LABEL_LIST), "suffix": Attr(types.STRING, default="!")},
    sharded=True,
)


def words_of_shard(ctx):
    """The map phase of drop_shared: the distinct words of one shard."""
    with open(ctx.workspace / "units.log", "a") as log:
        log.write(f"{ctx.label} words\\tmap\\n")
    words = set()
    for line in open(ctx.location("shard"), encoding="utf-8"):
        words.update(json.loads(line)["text"].split())
    (ctx.out / "words.json").write_text(json.dumps(sorted(words)))


def drop_in_shard(ctx):
    """The apply phase: the documents of one shard holding no word of `shared`."""
    with open(ctx.workspace / "units.log", "a") as log:
        log.write(f"{ctx.label} drop\\tapply\\n")
    shared = set(json.loads(ctx.location("shared").read_text()))
    with open(ctx.out / "docs.jsonl", "w", encoding="utf-8") as out:
        for line in open(ctx.location("shard"), encoding="utf-8"):
            if not shared & set(json.loads(line)["text"].split()):
                out.write(line)


def _drop_shared(ctx):
    """A global step, as dedup is: words per shard (map), the words in more than one shard
    (reduce, here), then each shard without the documents holding one (apply)."""
    shards = [path for label in ctx.attrs["data"] for path in ctx.files(label)]
    names = [path.name for path in shards]
    words = ctx.map_shards("toyshards:words_of_shard", [ShardUnit(n, {"shard": p}) for n, p in zip(names, shards)])
    seen = {}
    for result in words:
        for word in result.read_json("words.json"):
            seen[word] = seen.get(word, 0) + 1
    shared = ctx.tmp / "shared.json"
    shared.write_text(json.dumps(sorted(word for word, count in seen.items() if count > 1)))
    units = [ShardUnit(n, {"shard": p, "shared": shared}) for n, p in zip(names, shards)]
    for result in ctx.map_shards("toyshards:drop_in_shard", units):
        result.place("docs.jsonl", ctx.out / result.name)


drop_shared = Rule(
    name="drop_shared",
    impl=_drop_shared,
    attrs={"data": Attr(types.LABEL_LIST)},
    sharded=True,
    resources=Resources(cpu=2),
)
'''

BUILD = """
tag_docs(name = "tagged", data = glob(["data/*.jsonl"]), suffix = "{first}", resources = {{"cpu": 3}})
tag_docs(name = "again", data = [":tagged"], suffix = "{second}", resources = {{"cpu": 3}})
"""


def _documents(*texts: str) -> str:
    return "".join(json.dumps({"text": text}) + "\n" for text in texts)


SHARDS = {
    "p/data/a.jsonl": _documents("alpha", "beta"),
    "p/data/b.jsonl": _documents("gamma"),
    "p/data/c.jsonl": _documents("delta", "epsilon", "zeta"),
}


def _workspace(make_workspace, first: str = "!", second: str = "?", **shards: str) -> Path:
    files = {"toyshards.py": RULES, "p/BUILD.marin": BUILD.format(first=first, second=second), **SHARDS, **shards}
    return make_workspace(files, 'rules = ["toyshards"]\n')


def _set_build(ws: Path, first: str = "!", second: str = "?") -> None:
    (ws / "p" / "BUILD.marin").write_text(BUILD.format(first=first, second=second))


def _units_run(ws: Path) -> list[str]:
    """Which units ran since the last call (`//p:tagged [data/a.jsonl]`, ...), sorted; then forgotten."""
    log = ws / "units.log"
    if not log.exists():
        return []
    lines = log.read_text().splitlines()
    log.unlink()
    return sorted(line.split("\t")[0] for line in lines)


def _output(data: dict, label: str) -> Path:
    """A built target's output directory, as local files (on any store: `marinbuild where`)."""
    rc, out, err = run_cli(data["ws"], "where", label, store=data["store"])
    assert rc == 0, err
    return Path(out.strip())


def _build(ws: Path, *args: str, store: str | None = None, expect_rc: int | None = 0) -> dict:
    data = build_json(ws, *args, store=store, expect_rc=expect_rc)
    return {**data, "ws": ws, "store": store}


def _show(data: dict, target: str) -> dict:
    rc, out, err = run_cli(data["ws"], "show", "--json", target, store=data["store"])
    assert rc == 0, err
    return json.loads(out)


def _ran_on(data: dict, target: str) -> tuple[str, list[dict]]:
    """The executor and machines the entry of `target` (a label or a key) records."""
    provenance = _show(data, target)["provenance"]
    return provenance["executor"], provenance["ran_on"]


def _tree(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in root.rglob("*") if path.is_file()}


def _texts(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text().splitlines()]


ALL_UNITS = [
    "//p:again [data/a.jsonl]",
    "//p:again [data/b.jsonl]",
    "//p:again [data/c.jsonl]",
    "//p:tagged [data/a.jsonl]",
    "//p:tagged [data/b.jsonl]",
    "//p:tagged [data/c.jsonl]",
]


@pytest.mark.parametrize("remote", [False, True], ids=["local", "gcs"])
def test_only_the_units_of_new_or_changed_shards_run(make_workspace, request, remote):
    store = f"gs://{request.getfixturevalue('gcs_bucket')}/team" if remote else None
    ws = _workspace(make_workspace)
    events = ws / "events.jsonl"
    first = _build(ws, "--events", str(events), "//p:all", store=store)
    assert statuses(first) == {"//p:tagged": "built", "//p:again": "built"}, first["stderr"]
    assert _units_run(ws) == ALL_UNITS
    # Progress in shards and in what the units count (their documents).
    progress = [
        event for event in map(json.loads, events.read_text().splitlines()) if event["event"] == "step_progress"
    ]
    last = [event for event in progress if event["label"] == "//p:again" and "shards" in event["unit"]][-1]
    assert (last["done"], last["total"], last["unit"]) == (3, 3, "shards, 6 docs")
    again = _output(first, "//p:again")
    assert _texts(again / "data" / "c.jsonl") == ["delta!?", "epsilon!?", "zeta!?"]
    assert json.loads((again / "summary.json").read_text()) == {"documents": 6, "shards": 3}

    assert set(statuses(_build(ws, "//p:all", store=store)).values()) == {"cached"}
    assert _units_run(ws) == []

    # A new file: a new shard; only its units run, in both steps (the second step's other
    # inputs are the same bytes as before).
    (ws / "p" / "data" / "d.jsonl").write_text(_documents("eta"))
    added = _build(ws, "//p:all", store=store)
    assert statuses(added) == {"//p:tagged": "built", "//p:again": "built"}
    assert _units_run(ws) == ["//p:again [data/d.jsonl]", "//p:tagged [data/d.jsonl]"]
    assert _texts(_output(added, "//p:again") / "data" / "d.jsonl") == ["eta!?"]
    assert json.loads((_output(added, "//p:again") / "summary.json").read_text()) == {"documents": 7, "shards": 4}

    # A renamed file is the same content: its step runs again (its output names change),
    # but no unit does.
    (ws / "p" / "data" / "d.jsonl").rename(ws / "p" / "data" / "e.jsonl")
    renamed = _build(ws, "//p:all", store=store)
    assert statuses(renamed) == {"//p:tagged": "built", "//p:again": "built"}
    assert _units_run(ws) == []
    assert _texts(_output(renamed, "//p:again") / "data" / "e.jsonl") == ["eta!?"]

    # A parameter of the second step reruns all its units, and nothing upstream.
    _set_build(ws, second="??")
    changed = _build(ws, "//p:all", store=store)
    assert statuses(changed) == {"//p:tagged": "cached", "//p:again": "built"}
    assert _units_run(ws) == [f"//p:again [data/{name}.jsonl]" for name in "abce"]
    assert _texts(_output(changed, "//p:again") / "data" / "a.jsonl") == ["alpha!??", "beta!??"]


def test_a_step_entry_names_its_units_and_a_local_store_links_their_files(make_workspace):
    ws = _workspace(make_workspace)
    built = _build(ws, "//p:tagged")
    rc, out, err = run_cli(ws, "show", "--json", "//p:tagged")
    assert rc == 0, err
    shards = json.loads(out)["shards"]
    assert len(shards) == 3
    units = {}
    for key in shards:
        rc, out, err = run_cli(ws, "show", "--json", key)
        assert rc == 0, err
        unit = json.loads(out)
        assert unit["recipe"]["rule"] == "shard" and unit["recipe"]["attrs"] == {"suffix": "!"}
        units[unit["label"]] = unit
    assert sorted(units) == ["//p:tagged [data/a.jsonl]", "//p:tagged [data/b.jsonl]", "//p:tagged [data/c.jsonl]"]
    # A unit's recipe holds its shard by content, not by name.
    unit_a = units["//p:tagged [data/a.jsonl]"]
    recipe = json.loads(entry_path(ws / "cache", unit_a["key"]).read_text())["recipe"]
    assert recipe["attrs"]["inputs"] == {"shard": digest_file(ws / "p" / "data" / "a.jsonl")}
    assert "a.jsonl" not in json.dumps(recipe)
    # On a local store the step's files are the units' own, hard-linked.
    step_file = _output(built, "//p:tagged") / "data" / "a.jsonl"
    unit_dir = (
        ws / "cache" / "out" / units["//p:tagged [data/a.jsonl]"]["key"][:2] / units["//p:tagged [data/a.jsonl]"]["key"]
    )
    assert os.stat(step_file).st_ino == os.stat(unit_dir / "docs.jsonl").st_ino
    # A unit reruns with its step, not alone.
    rc, out, err = run_cli(ws, "rerun", unit_a["key"])
    assert rc == 2 and "is the unit data/a.jsonl of the sharded step //p:tagged" in err, err
    assert f"marinbuild rerun {built['by_label']['//p:tagged']['key']}" in err
    # Each unit's attempt is recorded, with its shard, its step and what it measured.
    [record] = attempt_records(ws / "cache", units["//p:tagged [data/c.jsonl]"]["key"])
    assert record["status"] == "succeeded" and record["shard"] == "data/c.jsonl"
    assert record["shard_of"]["label"] == "//p:tagged" and record["measured"] == {"documents": 3}


def test_cache_gc_keeps_the_units_of_a_kept_step(make_workspace):
    ws = _workspace(make_workspace)
    build_json(ws, "//p:tagged")
    entries = sorted(path.name for path in (ws / "cache" / "ac").glob("*/*.json"))
    assert len(entries) == 4  # the step's and its three units'
    rc, out, err = run_cli(ws, "cache", "gc", "--grace", "0s")
    assert rc == 0, err
    assert sorted(path.name for path in (ws / "cache" / "ac").glob("*/*.json")) == entries
    _units_run(ws)
    assert statuses(build_json(ws, "//p:tagged")) == {"//p:tagged": "cached"}
    # Once the step goes (its recipe changed, and the newest build used the new one), its
    # units go with it.
    time.sleep(1)  # a later second: of two builds in one second, gc keeps the keys of both
    _set_build(ws, first="?!")
    build_json(ws, "//p:tagged")
    rc, out, err = run_cli(ws, "cache", "gc", "--grace", "0s")
    assert rc == 0, err
    left = sorted(path.name for path in (ws / "cache" / "ac").glob("*/*.json"))
    assert len(left) == 4 and not set(left) & set(entries)


def test_a_failing_unit_fails_its_step_by_name_and_the_others_stay_published(make_workspace):
    ws = _workspace(make_workspace, **{"p/data/c.jsonl": _documents("delta", "explode")})
    failed = _build(ws, "//p:tagged", expect_rc=1)
    reason = failed["by_label"]["//p:tagged"]["reason"]
    assert reason.startswith("shard data/c.jsonl: RuntimeError: a document that breaks the unit"), reason
    assert "2 of the step's 3 units done, kept for the next build" in reason
    assert _units_run(ws) == ["//p:tagged [data/a.jsonl]", "//p:tagged [data/b.jsonl]", "//p:tagged [data/c.jsonl]"]
    # The unit's traceback is in its own log, copied into the step's.
    rc, out, err = run_cli(ws, "log", "//p:tagged")
    assert "shard data/c.jsonl failed" in out and "RuntimeError: a document that breaks the unit" in out

    (ws / "p" / "data" / "c.jsonl").write_text(_documents("delta"))
    fixed = _build(ws, "//p:tagged")
    assert statuses(fixed) == {"//p:tagged": "built"}
    assert _units_run(ws) == ["//p:tagged [data/c.jsonl]"]


def test_a_unit_whose_worker_died_is_tried_again_with_the_others_published(make_workspace):
    ws = _workspace(make_workspace, **{"p/data/c.jsonl": _documents("die once")})
    built = _build(ws, "//p:tagged")
    assert statuses(built) == {"//p:tagged": "built"}
    assert "trying again" in built["stderr"]
    # The step's second attempt ran only the unit that died: the others were published.
    assert _units_run(ws) == [
        "//p:tagged [data/a.jsonl]",
        "//p:tagged [data/b.jsonl]",
        *["//p:tagged [data/c.jsonl]"] * 2,
    ]
    records = sorted(
        attempt_records(ws / "cache", built["by_label"]["//p:tagged"]["key"]), key=lambda r: r["attempt_number"]
    )
    assert [(record["status"], record.get("failure")) for record in records] == [
        ("failed", "worker_lost"),
        ("succeeded", None),
    ]
    assert records[0]["error"].startswith(
        "worker lost: shard data/c.jsonl: worker lost: the worker process was killed by signal SIGKILL"
    )


def test_a_shard_that_is_not_json_lines_is_a_clean_error(make_workspace):
    ws = _workspace(make_workspace, **{"p/data/b.jsonl": _documents("gamma") + "not json\n"})
    failed = _build(ws, "//p:tagged", expect_rc=1)
    reason = failed["by_label"]["//p:tagged"]["reason"]
    assert reason.startswith("shard data/b.jsonl: line 2: not a JSON line with a text field"), reason
    assert "Traceback" not in reason and "Traceback" not in failed["stderr"]


def test_a_killed_build_resumes_with_the_units_it_published(make_workspace):
    ws = _workspace(make_workspace, **{"p/data/c.jsonl": _documents("wait")})
    (ws / "HOLD").write_text("")
    builder = subprocess.Popen(
        cli_command(ws, "build", "//p:tagged"), cwd=ws, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    store = ws / "cache"
    deadline = time.monotonic() + CLI_TIMEOUT_S
    try:
        while len(list((store / "ac").glob("*/*.json"))) < 2 or not (ws / "units.log").exists():
            assert builder.poll() is None and time.monotonic() < deadline, builder.communicate()
            time.sleep(0.05)
        while len((ws / "units.log").read_text().splitlines()) < 3:  # the unit that waits started too
            assert builder.poll() is None and time.monotonic() < deadline, builder.communicate()
            time.sleep(0.05)
    finally:
        builder.send_signal(signal.SIGKILL)
        builder.communicate()
    assert _units_run(ws) == ["//p:tagged [data/a.jsonl]", "//p:tagged [data/b.jsonl]", "//p:tagged [data/c.jsonl]"]
    (ws / "HOLD").unlink()
    resumed = _build(ws, "//p:tagged")
    assert statuses(resumed) == {"//p:tagged": "built"}
    assert _units_run(ws) == ["//p:tagged [data/c.jsonl]"]
    assert _texts(_output(resumed, "//p:tagged") / "data" / "c.jsonl") == ["wait!"]


def test_a_global_step_maps_reduces_and_applies(make_workspace):
    """Changing one shard reruns its map unit, and every apply unit (the reduce changed)."""
    shards = {
        "q/a.jsonl": _documents("red fish", "blue sky"),
        "q/b.jsonl": _documents("red apple", "green leaf"),
        "q/c.jsonl": _documents("grey stone"),
        "q/BUILD.marin": 'drop_shared(name = "dropped", data = glob(["*.jsonl"]))',
    }
    ws = _workspace(make_workspace, **shards)
    built = _build(ws, "//q:dropped")
    assert _texts(_output(built, "//q:dropped") / "a.jsonl") == ["blue sky"]
    assert _texts(_output(built, "//q:dropped") / "b.jsonl") == ["green leaf"]
    maps = [f"//q:dropped [{name}.jsonl] words" for name in "abc"]
    applies = [f"//q:dropped [{name}.jsonl] drop" for name in "abc"]
    assert _units_run(ws) == sorted(maps + applies)
    rc, out, err = run_cli(ws, "show", "--json", "//q:dropped")
    assert rc == 0 and len(json.loads(out)["shards"]) == 6, err

    (ws / "q" / "c.jsonl").write_text(_documents("grey sky"))
    rebuilt = _build(ws, "//q:dropped")
    assert _units_run(ws) == sorted([maps[2], *applies])
    # "sky" is in a and c now: "blue sky" and "grey sky" are dropped too.
    assert _texts(_output(rebuilt, "//q:dropped") / "a.jsonl") == []
    assert _texts(_output(rebuilt, "//q:dropped") / "c.jsonl") == []


def test_rerun_check_runs_every_unit_again_aside(make_workspace):
    ws = _workspace(make_workspace)
    built = _build(ws, "//p:tagged")
    _units_run(ws)
    key = built["by_label"]["//p:tagged"]["key"]
    entries = sorted((ws / "cache" / "ac").rglob("*.json"))
    rc, out, err = run_cli(ws, "rerun", "--check", key)
    assert rc == 0 and "the rerun matches the stored output" in out, out + err
    assert _units_run(ws) == ["//p:tagged [data/a.jsonl]", "//p:tagged [data/b.jsonl]", "//p:tagged [data/c.jsonl]"]
    assert sorted((ws / "cache" / "ac").rglob("*.json")) == entries
    assert not list((ws / "cache" / "checks").rglob("*.jsonl"))


def test_a_sharded_rule_is_checked_when_declared():
    from marinbuild.targets import Execution, Rule

    with pytest.raises(ValueError, match="is sharded: its impl runs in the builder"):
        Rule(name="bad", impl=lambda ctx: None, attrs={}, sharded=True, execution=Execution.SUBPROCESS)


@pytest.mark.parametrize("remote", [False, True], ids=["local", "gcs"])
def test_sharded_steps_on_a_ray_cluster(make_workspace, ray_cluster, request, remote):
    """The units run as Ray tasks, which fetch their shards from the store and upload their
    outputs; the same keys and bytes as a local build."""
    store = f"gs://{request.getfixturevalue('gcs_bucket')}/team" if remote else None
    local = _workspace(make_workspace)
    on_ray = _workspace(make_workspace)
    ray = ("--executor", "ray", "--ray-address", ray_cluster)
    expected = _build(local, "//p:all")
    first = _build(on_ray, *ray, "//p:all", store=store)
    assert keys(first) == keys(expected), first["stderr"]
    for label in ("//p:tagged", "//p:again"):
        assert _tree(_output(first, label)) == _tree(_output(expected, label))
    # Where the units ran: the step's entry names each node once, with how many of its units
    # ran there (not a line a unit); each unit's entry names its own node. Here, this machine.
    assert _ran_on(expected, "//p:tagged") == ("local", [{"host": socket.gethostname()}])
    assert _ran_on(expected, _show(expected, "//p:tagged")["shards"][0]) == ("local", [{"host": socket.gethostname()}])
    executor, (node,) = _ran_on(first, "//p:tagged")
    assert (executor, node["units"], node["accelerators"], node["host"]) == ("ray", 3, {}, socket.gethostname())
    unit = _show(first, "//p:tagged")["shards"][0]
    assert _ran_on(first, unit) == ("ray", [{name: value for name, value in node.items() if name != "units"}])
    lines = (on_ray / "units.log").read_text().splitlines()
    assert len(lines) == 6 and all(line.split("\t")[1].startswith("ray::") for line in lines), lines
    _units_run(on_ray)
    (on_ray / "p" / "data" / "d.jsonl").write_text(_documents("eta"))
    added = _build(on_ray, *ray, "//p:all", store=store)
    assert statuses(added) == {"//p:tagged": "built", "//p:again": "built"}
    assert _units_run(on_ray) == ["//p:again [data/d.jsonl]", "//p:tagged [data/d.jsonl]"]


def test_a_failing_unit_on_a_ray_cluster_names_its_shard(make_workspace, ray_cluster):
    ws = _workspace(make_workspace, **{"p/data/c.jsonl": _documents("explode")})
    ray = ("--executor", "ray", "--ray-address", ray_cluster)
    failed = _build(ws, *ray, "//p:tagged", expect_rc=1)
    reason = failed["by_label"]["//p:tagged"]["reason"]
    assert reason.startswith("shard data/c.jsonl: RuntimeError: a document that breaks the unit"), reason
    # The failed step's record names the node its units ran on, the failed one's among them.
    (record,) = attempt_records(ws / "cache", failed["by_label"]["//p:tagged"]["key"])
    (node,) = record["ran_on"]
    assert (record["executor"], len(node["node_id"]), node["units"] >= 1) == ("ray", 56, True), record
    _units_run(ws)
    (ws / "p" / "data" / "c.jsonl").write_text(_documents("delta"))
    assert statuses(_build(ws, *ray, "//p:tagged")) == {"//p:tagged": "built"}
    assert _units_run(ws) == ["//p:tagged [data/c.jsonl]"]
