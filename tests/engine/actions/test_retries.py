"""Retries by the rule's policy, locally: a worker killed by SIGKILL (the OOM killer, say)
is a lost worker and is tried again; a step that fails by itself is not (py_step's policy)."""

from __future__ import annotations

from pathlib import Path

from conftest import attempt_records, build_json

STEPS = """
import os, signal
from pathlib import Path


def killed_once(ctx):
    marker = Path(ctx.attrs["config"]["marker"])
    if not marker.exists():
        marker.write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)
    (ctx.out / "done.txt").write_text("second attempt")


def fails(ctx):
    raise ValueError("always")
"""


def test_a_killed_worker_is_retried_a_failing_step_is_not(make_workspace, tmp_path: Path) -> None:
    build = f"""
py_step(name = "flaky", fn = "steps.py:killed_once", config = {{"marker": "{tmp_path / "marker"}"}})
py_step(name = "broken", fn = "steps.py:fails")
"""
    ws = make_workspace({"pkg/BUILD.marin": build, "pkg/steps.py": STEPS})
    data = build_json(ws, "--keep-going", "//pkg:all", expect_rc=1)
    flaky, broken = data["by_label"]["//pkg:flaky"], data["by_label"]["//pkg:broken"]
    assert (flaky["status"], broken["status"]) == ("built", "failed")
    assert (Path(flaky["output"]) / "done.txt").read_text() == "second attempt"
    records = sorted(attempt_records(ws / "cache", flaky["key"]), key=lambda record: record["attempt_number"])
    assert [(r["attempt_number"], r["status"], r.get("failure")) for r in records] == [
        (1, "failed", "worker_lost"),
        (2, "succeeded", None),
    ]
    assert "killed by signal SIGKILL" in records[0]["error"]
    (only,) = attempt_records(ws / "cache", broken["key"])
    assert (only["status"], only["failure"]) == ("failed", "failed")
