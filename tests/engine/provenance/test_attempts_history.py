"""Every attempt on record: `marinbuild log`, `marinbuild history`, `query failed()`, and
the Python API under them (marinbuild.provenance), for failures, successes, a running
step and an interrupted build."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import textwrap
import time

from conftest import CLI_TIMEOUT_S, attempt_records, build_json, run_cli, start_cli, statuses

from marinbuild import provenance
from marinbuild.commands.inspect import attempts, history
from marinbuild.commands.query import query
from marinbuild.report.blocks import step_file
from marinbuild.session import Session
from marinbuild.store import AttemptStatus

BAD_CMD = "echo partial > $@; echo boom-on-stderr >&2; exit 3"
BUILD = f"""\
    genrule(name = "bad", outs = ["bad.txt"], cmd = {BAD_CMD!r})
    genrule(name = "good", outs = ["g.txt"], cmd = "echo g > $@")
    """


def test_a_failed_step_is_on_record_in_log_history_and_query(make_workspace):
    ws = make_workspace({"pkg/BUILD.marin": BUILD})
    first = build_json(ws, "-k", "//pkg:all", expect_rc=1)
    second = build_json(ws, "-k", "//pkg:all", expect_rc=1)
    # Never served from the cache: the failing step ran again, under the same key.
    assert statuses(second) == {"//pkg:bad": "failed", "//pkg:good": "cached"}
    key = first["by_label"]["//pkg:bad"]["key"]
    assert second["by_label"]["//pkg:bad"]["key"] == key

    rc, out, err = run_cli(ws, "log", "//pkg:bad")
    assert rc == 0, err
    assert "boom-on-stderr" in out
    assert "attempt 2 of 2" in err and "failed" in err and "exit status 3" in err
    assert "command exited with status 3" in err
    assert second["by_label"]["//pkg:bad"]["attempt"] in err

    rc, out, err = run_cli(ws, "log", "--attempt", "1", "//pkg:bad")
    assert rc == 0 and "attempt 1 of 2" in err and first["by_label"]["//pkg:bad"]["attempt"] in err
    assert run_cli(ws, "log", "--attempt", "3", "//pkg:bad")[0] == 2

    rc, out, err = run_cli(ws, "log", "--list", "//pkg:bad")
    assert rc == 0 and out.count("failed") == 2 and out.count("exit status 3") == 2

    rc, out, err = run_cli(ws, "history")
    assert rc == 0, err
    assert out.count("failed   //pkg:bad") == 2
    assert out.count("built    //pkg:good") == 1  # the second build found it cached: not listed
    assert out.count("command exited with status 3") == 2

    rc, out, err = run_cli(ws, "history", "--json", "//pkg:good")
    items = json.loads(out)
    assert [item["result"] for item in items] == ["failed"]
    [target] = items[0]["targets"]
    assert target["label"] == "//pkg:good" and target["attempt"]["status"] == "succeeded"

    rc, out, err = run_cli(ws, "query", "failed(//...)")
    assert rc == 0 and out.split() == ["//pkg:bad"]


def test_history_of_an_unknown_package_or_target_is_bad_input_as_for_build(make_workspace):
    ws = make_workspace({"pkg/BUILD.marin": BUILD})
    build_json(ws, "//pkg:good")
    for pattern, message in (
        ("//experiments/nonexistent:all", "no package '//experiments/nonexistent'"),
        ("//pkg:nothing", "no target 'nothing' in package //pkg"),
        ("//pkg/sub/...", "directory 'pkg/sub' does not exist"),
    ):
        rc, out, err = run_cli(ws, "history", pattern)
        assert (rc, out) == (2, "") and message in err, (pattern, rc, out, err)
        assert run_cli(ws, "build", pattern)[0] == 2
    # A target never built has an empty history; one deleted since its builds still shows them.
    assert run_cli(ws, "history", "//pkg:bad")[:2] == (0, "")
    (ws / "pkg/BUILD.marin").write_text('genrule(name = "bad", outs = ["bad.txt"], cmd = "exit 3")\n')
    rc, out, err = run_cli(ws, "history", "//pkg:good", "//pkg:bad")
    assert rc == 0 and "built    //pkg:good" in out, err


def test_attempts_of_a_label_span_its_keys_and_outlive_its_build_file(make_workspace):
    ws = make_workspace({"pkg/BUILD.marin": BUILD})
    build_json(ws, "-k", "//pkg:all", expect_rc=1)
    (ws / "pkg/BUILD.marin").write_text(textwrap.dedent(BUILD).replace("exit 3", "exit 4"))
    build_json(ws, "-k", "//pkg:bad", expect_rc=1)
    (ws / "pkg/BUILD.marin").unlink()
    session = Session.open(ws, cwd=ws / "pkg")
    recorded = attempts(session, ":bad")  # relative to the current package, which is gone
    assert [(record.status, record.exit_status) for record in recorded] == [
        (AttemptStatus.FAILED, 3),
        (AttemptStatus.FAILED, 4),
    ]
    assert recorded[0].key != recorded[1].key
    assert all(record.host and record.user and record.started and record.finished for record in recorded)
    assert "boom-on-stderr" in provenance.read_log(session.store, recorded[1])
    [item] = history(session, ["//pkg:bad"], limit=1)
    assert [(outcome.label, outcome.status) for outcome, _ in item.outcomes] == [("//pkg:bad", "failed")]
    assert item.outcomes[0][1] == recorded[1]


def test_a_running_step_shows_its_log_and_an_interrupted_one_is_cancelled(make_workspace):
    ws = make_workspace(
        {"pkg/BUILD.marin": 'genrule(name = "slow", outs = ["o.txt"], cmd = "echo halfway; sleep 60; echo > $@")\n'}
    )
    builder = start_cli(ws, "build", "//pkg:slow", own_group=True)
    try:
        deadline = time.monotonic() + CLI_TIMEOUT_S
        while True:
            rc, out, err = run_cli(ws, "log", "//pkg:slow")
            if rc == 0 and "halfway" in out:
                break
            assert time.monotonic() < deadline, f"the running step's log never showed:\n{out}\n{err}"
            time.sleep(0.2)
        assert "running" in err
        [item] = history(Session.open(ws, cwd=ws))
        assert item.invocation.result == "running"
        assert [(outcome.label, outcome.status) for outcome, _ in item.outcomes] == [("//pkg:slow", "pending")]
        os.killpg(builder.pid, signal.SIGINT)
        builder.wait(timeout=CLI_TIMEOUT_S)
    finally:
        if builder.poll() is None:
            os.killpg(builder.pid, signal.SIGKILL)
    assert builder.returncode == 130, builder.stderr.read()
    session = Session.open(ws, cwd=ws)
    [record] = attempts(session, "//pkg:slow")
    assert record.status is AttemptStatus.CANCELLED and "interrupted" in record.error
    assert "halfway" in provenance.read_log(session.store, record)
    [item] = history(session)
    assert item.invocation.result == "interrupted"
    assert query(session, "failed(//...)").labels == ()  # an interrupted step is not a failed one
    assert [r["status"] for r in attempt_records(ws / "cache", record.key)] == ["cancelled"]


def test_the_attempt_of_a_killed_builder_reads_as_abandoned(make_workspace, tmp_path):
    """SIGKILL leaves no chance to record the end: the record stays `running`, and readers
    see it as abandoned once nobody holds the key; the next build runs the step again."""
    hang = tmp_path / "hang"  # the step hangs while this exists (the same recipe both times)
    hang.touch()
    cmd = f"echo halfway; while [ -e {hang} ]; do sleep 0.1; done; echo done > $@"
    ws = make_workspace({"pkg/BUILD.marin": f'genrule(name = "slow", outs = ["o.txt"], cmd = {cmd!r})\n'})
    builder = start_cli(ws, "build", "//pkg:slow", own_group=True)
    try:
        deadline = time.monotonic() + CLI_TIMEOUT_S
        while not [
            record
            for record in attempts(Session.open(ws, cwd=ws), "//pkg:slow")
            if record.status is AttemptStatus.RUNNING
        ]:
            assert time.monotonic() < deadline, "the step never started"
            time.sleep(0.2)
    finally:
        os.killpg(builder.pid, signal.SIGKILL)
        builder.wait(timeout=CLI_TIMEOUT_S)
    [record] = attempts(Session.open(ws, cwd=ws), "//pkg:slow")
    assert record.status is AttemptStatus.ABANDONED
    assert [r["status"] for r in attempt_records(ws / "cache", record.key)] == ["running"]  # as written
    rc, out, err = run_cli(ws, "log", "--list", "//pkg:slow")
    assert rc == 0 and "abandoned" in out and "running" not in out, out + err
    [item] = history(Session.open(ws, cwd=ws))
    assert item.invocation.result == "abandoned"  # on the machine whose process table says so

    hang.unlink()
    rebuilt = build_json(ws, "//pkg:slow")
    assert statuses(rebuilt) == {"//pkg:slow": "built"} and rebuilt["by_label"]["//pkg:slow"]["key"] == record.key
    assert [r.status for r in attempts(Session.open(ws, cwd=ws), "//pkg:slow")] == [
        AttemptStatus.ABANDONED,
        AttemptStatus.SUCCEEDED,
    ]


def test_event_stream_to_a_file_and_the_store(make_workspace, tmp_path):
    ws = make_workspace({"pkg/BUILD.marin": BUILD})
    events_file = tmp_path / "events.jsonl"
    for _ in range(2):
        rc, out, err = run_cli(ws, "build", "-k", "--events", str(events_file), "//pkg:all")
        assert rc == 1, err
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    names = [event["event"] for event in events]
    assert names.count("build_started") == 2 and names.count("build_finished") == 2
    assert names[0] == "build_started" and names[-1] == "build_finished"
    steps = [(event["event"], event.get("label")) for event in events if event["event"] != "step_progress"]
    first_build, second_build = steps[: len(steps) // 2], steps[len(steps) // 2 :]
    assert ("step_started", "//pkg:bad") in first_build and ("step_failed", "//pkg:bad") in first_build
    assert ("step_finished", "//pkg:good") in first_build
    assert ("cache_hit", "//pkg:good") in second_build and ("step_failed", "//pkg:bad") in second_build
    failed = next(event for event in events if event["event"] == "step_failed")
    assert failed["key"] and "status 3" in failed["reason"] and failed["attempt"]
    assert all(isinstance(event["time"], float) for event in events)
    # The store keeps each invocation's stream next to its record, less the cache hits
    # (the record lists them).
    stored = sorted((ws / "cache" / "invocations").glob("*.events.jsonl"))
    assert len(stored) == 2
    kept = [line for line in events_file.read_text().splitlines() if '"event": "cache_hit"' not in line]
    assert "".join(path.read_text() for path in stored).splitlines() == kept


MEASURING_STEPS = """\
import time


def timed(ctx):
    (ctx.out / "result.txt").write_text(str(ctx.attrs["config"]["n"] ** 2))
    ctx.measure(wall_time_s=time.time() % 7, finished_at=time.time())


def timed_then_fails(ctx):
    ctx.measure(got_to="the middle")
    raise RuntimeError("out of memory (on purpose)")
"""


def test_measurements_go_to_the_attempt_record_not_the_output(make_workspace):
    """`ctx.measure`: facts about an attempt (timing) that must not make outputs differ."""
    ws = make_workspace(
        {
            "pkg/steps.py": MEASURING_STEPS,
            "pkg/BUILD.marin": """\
        py_step(name = "timed", fn = "steps.py:timed", config = {"n": 7})
        py_step(name = "failing", fn = "steps.py:timed_then_fails")
        """,
        }
    )
    first = build_json(ws, "-k", "//pkg:all", expect_rc=1)
    key = first["by_label"]["//pkg:timed"]["key"]
    [record] = [r for r in attempt_records(ws / "cache", key) if r["status"] == "succeeded"]
    assert set(record["measured"]) == {"wall_time_s", "finished_at"}
    rc, out, err = run_cli(ws, "show", "--json", "//pkg:timed")
    assert rc == 0, err
    assert json.loads(out)["measured"] == record["measured"]
    rc, out, err = run_cli(ws, "show", "//pkg:timed")
    assert "measured by the attempt that built it (not part of the output)" in out and "finished_at:" in out

    # What a failed attempt measured before it failed is kept with its error.
    [failed] = attempt_records(ws / "cache", first["by_label"]["//pkg:failing"]["key"])
    assert failed["status"] == "failed" and failed["measured"] == {"got_to": "the middle"}
    assert "out of memory (on purpose)" in failed["error"]

    # Built again from scratch: other measurements, the same output tree.
    digest = json.loads(run_cli(ws, "show", "--json", "//pkg:timed")[1])["tree_digest"]
    shutil.rmtree(ws / "cache")
    second = build_json(ws, "//pkg:timed")
    assert statuses(second) == {"//pkg:timed": "built"} and second["by_label"]["//pkg:timed"]["key"] == key
    shown = json.loads(run_cli(ws, "show", "--json", "//pkg:timed")[1])
    assert shown["tree_digest"] == digest and shown["measured"]["finished_at"] > record["measured"]["finished_at"]


def test_an_attempt_names_where_it_ran_and_an_older_record_reads_as_before(make_workspace, tmp_path):
    ws = make_workspace({"pkg/BUILD.marin": textwrap.dedent(BUILD)})
    data = build_json(ws, "-k", "//pkg:all", expect_rc=1)
    host = socket.gethostname()
    for label in ("//pkg:bad", "//pkg:good"):
        (record,) = attempt_records(ws / "cache", data["by_label"][label]["key"])
        assert (record["executor"], record["ran_on"], record["host"]) == ("local", [{"host": host}], host)
    rc, out, err = run_cli(ws, "show", "//pkg:good")
    assert rc == 0 and f"    executor: local\n    ran on: {host}\n" in out, out + err
    rc, out, err = run_cli(ws, "history")
    assert rc == 0 and out.count(f"on local: {host}") == 2, out + err

    # A record written before attempts named where they ran reads as it did: by its builder's host.
    key = data["by_label"]["//pkg:bad"]["key"]
    (path,) = (ws / "cache" / "attempts" / key[:2] / key).glob("*.json")
    old = {name: value for name, value in json.loads(path.read_text()).items() if name not in ("executor", "ran_on")}
    path.write_text(json.dumps(old))
    rc, out, err = run_cli(ws, "history")
    assert rc == 0 and out.count(f"on local: {host}") == 1 and "failed   //pkg:bad" in out, out + err
    rc, out, err = run_cli(ws, "report", "//pkg:all", "-o", str(tmp_path / "report"))
    assert rc == 0, err
    page = (tmp_path / "report" / "steps" / step_file("//pkg:bad")).read_text()
    assert "<th>ran on</th>" not in page and f"<th>host</th><td>{host}</td>" in page
    page = (tmp_path / "report" / "steps" / step_file("//pkg:good")).read_text()
    assert f"<th>ran on</th><td>local: {host}</td>" in page
