"""A failing step: nothing published, the attempt and its log recorded, dependents skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import (
    ac_entries,
    attempt_logs,
    attempt_records,
    build_json,
    entry_path,
    output_text,
    run_cli,
    statuses,
    store_files,
)

BAD, AFTER, AFTER2 = "//pkg:bad", "//pkg:after_bad", "//pkg:after_after"
GOOD1, GOOD2, JOIN = "//pkg:good1", "//pkg:good2", "//pkg:join"

# `bad` comes first so that, with --jobs 1, it is the first step to run.
FAILING = """\
    genrule(name = "bad", outs = ["bad.txt"], cmd = {bad_cmd!r})
    genrule(name = "after_bad", srcs = [":bad"], outs = ["after.txt"], cmd = "cat $< > $@")
    genrule(name = "after_after", srcs = [":after_bad"], outs = ["after2.txt"], cmd = "cat $< > $@")
    genrule(name = "good1", outs = ["g1.txt"], cmd = "echo g1 > $@")
    genrule(name = "good2", srcs = [":good1"], outs = ["g2.txt"], cmd = "cat $< > $@; echo g2 >> $@")
    genrule(name = "join", srcs = [":good2", ":bad"], outs = ["join.txt"], cmd = "cat $(SRCS) > $@")
    """
BAD_CMD = "echo partial > $@; echo boom-on-stderr >&2; exit 3"


def failing_workspace(make_workspace, bad_cmd: str = BAD_CMD) -> Path:
    return make_workspace({"pkg/BUILD.marin": FAILING.format(bad_cmd=bad_cmd)})


def test_failure_with_keep_going(make_workspace):
    ws = failing_workspace(make_workspace)
    store = ws / "cache"
    result = build_json(ws, "--keep-going", "//pkg:all", expect_rc=1)
    assert statuses(result) == {
        BAD: "failed",
        AFTER: "skipped",
        AFTER2: "skipped",
        GOOD1: "built",
        GOOD2: "built",
        JOIN: "skipped",
    }
    assert result["counts"] == {"built": 2, "cached": 0, "failed": 1, "skipped": 3}
    assert output_text(result, GOOD2, "g2.txt") == "g1\ng2\n"

    bad = result["by_label"][BAD]
    key = bad["key"]
    assert key and bad["output"] is None
    assert "status 3" in bad["reason"]
    # Nothing published for the failed key: no entry, no output directory.
    assert not entry_path(store, key).exists()
    assert not (store / "out" / key[:2] / key).exists()
    assert {json.loads(p.read_text())["key"] for p in ac_entries(store)} == {
        result["by_label"][GOOD1]["key"],
        result["by_label"][GOOD2]["key"],
    }
    # The attempt is recorded, with its error and its log.
    records = attempt_records(store, key)
    assert len(records) == 1
    record = records[0]
    assert record["status"] == "failed"
    assert record["label"] == BAD and record["key"] == key
    assert "status 3" in record["error"]
    assert "started" in record and "finished" in record
    logs = attempt_logs(store, key)
    assert len(logs) == 1 and logs[0].stem == record["attempt"]
    assert "boom-on-stderr" in logs[0].read_text()
    assert Path(bad["log"]) == logs[0]
    # Dependents say why they were skipped.
    assert BAD in result["by_label"][AFTER]["reason"]
    assert BAD in result["by_label"][JOIN]["reason"]
    # The failure is shown on stderr with the tail of its log.
    assert f"failed {BAD}" in result["stderr"]
    assert "boom-on-stderr" in result["stderr"]
    # No staging left behind.
    assert not [p for p in store_files(store) if p.startswith("tmp/")]


def test_failure_without_keep_going_starts_nothing_new(make_workspace):
    ws = failing_workspace(make_workspace)
    store = ws / "cache"
    result = build_json(ws, "--jobs", "1", "//pkg:all", expect_rc=1)
    got = statuses(result)
    assert got[BAD] == "failed"
    assert got[AFTER] == got[AFTER2] == got[JOIN] == "skipped"
    # `bad` ran first and failed: the independent branch was never started.
    assert got[GOOD1] == "skipped" and got[GOOD2] == "skipped", got
    assert result["counts"]["built"] == 0
    assert ac_entries(store) == []
    assert "not started" in result["by_label"][GOOD1]["reason"]


def test_failures_are_not_cached_and_fixing_the_command_builds(make_workspace):
    ws = failing_workspace(make_workspace)
    store = ws / "cache"
    first = build_json(ws, "-k", "//pkg:all", expect_rc=1)
    key = first["by_label"][BAD]["key"]
    # The same failing command runs again: a failure is never served from the cache.
    second = build_json(ws, "-k", "//pkg:all", expect_rc=1)
    assert statuses(second)[BAD] == "failed"
    assert statuses(second)[GOOD1] == statuses(second)[GOOD2] == "cached"
    assert second["by_label"][BAD]["key"] == key
    assert [r["status"] for r in attempt_records(store, key)] == ["failed", "failed"]
    assert len(attempt_logs(store, key)) == 2

    (ws / "pkg/BUILD.marin").write_text((ws / "pkg/BUILD.marin").read_text().replace(BAD_CMD, "echo fixed > $@"))
    fixed = build_json(ws, "//pkg:all")
    assert statuses(fixed) == {
        BAD: "built",
        AFTER: "built",
        AFTER2: "built",
        GOOD1: "cached",
        GOOD2: "cached",
        JOIN: "built",
    }
    assert output_text(fixed, JOIN, "join.txt") == "g1\ng2\nfixed\n"
    new_key = fixed["by_label"][BAD]["key"]
    assert [r["status"] for r in attempt_records(store, new_key)] == ["succeeded"]
    assert entry_path(store, new_key).is_file()


@pytest.mark.parametrize(
    ("cmd", "message"),
    [
        pytest.param("false; echo late > $@", "status 1", id="set-e"),
        pytest.param("false | cat; echo late > $@", "status 1", id="pipefail"),
        pytest.param("echo $$UNDEFINED_VARIABLE_XYZ > $@", "status 1", id="set-u"),
        pytest.param("echo nothing", "not created: bad.txt", id="missing-output"),
        pytest.param("echo x > $@; echo y > $(RULEDIR)/extra.txt", "undeclared outputs: extra.txt", id="extra-output"),
    ],
)
def test_step_failures_publish_nothing(make_workspace, cmd, message):
    ws = make_workspace({"pkg/BUILD.marin": f'genrule(name = "bad", outs = ["bad.txt"], cmd = {cmd!r})\n'})
    store = ws / "cache"
    result = build_json(ws, "//pkg:bad", expect_rc=1)
    assert statuses(result) == {BAD: "failed"}
    assert message in result["by_label"][BAD]["reason"]
    key = result["by_label"][BAD]["key"]
    assert ac_entries(store) == []
    assert not (store / "out" / key[:2] / key).exists()
    [record] = attempt_records(store, key)
    assert record["status"] == "failed" and message in record["error"]


def test_failed_build_exit_status_and_plain_output(make_workspace):
    ws = failing_workspace(make_workspace)
    rc, out, err = run_cli(ws, "build", "-k", "//pkg:all")
    assert rc == 1
    # stdout lists the outputs of the requested targets that have one.
    assert "//pkg:good1:" in out and "//pkg:bad:" not in out
    assert "1 failed" in err and "3 skipped" in err
