"""`history` of a build stopped half-way reflects what it published and what it was running.

The case reported: a training published its model, then its evaluation was running when
the build got SIGTERM; `history` said the build did nothing, every target `pending`.
Here a quick step stands for the model and a slow one for its evaluation. Stopped by
SIGTERM, the build reads `interrupted`, the model `built`, the evaluation `cancelled`
with its attempt; killed outright (SIGKILL: its record is never rewritten), it reads
`abandoned`, the model still `built`, the evaluation `abandoned`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from conftest import CLI_TIMEOUT_S, run_cli, start_to_kill

from marinbuild.commands.inspect import attempts
from marinbuild.session import Session
from marinbuild.store import AttemptStatus


def _pipeline(marker: str, more: str = "") -> dict[str, str]:
    slow = f"echo evaluating; exec sleep {marker}"  # exec: the process the builder started is the sleep
    return {
        "pkg/BUILD.marin": f"""\
        genrule(name = "model", outs = ["m.txt"], cmd = "echo weights > $@")
        genrule(name = "eval", srcs = [":model"], outs = ["e.txt"], cmd = "{slow}")
        {more}
        """
    }


def _stop_mid_step(ws, marker: str, signum: int) -> None:
    """Build //pkg:all and send `signum` to the builder alone (as `kill` or a job scheduler
    would) once the step sleeping `marker` seconds runs; return when that step is gone."""
    builder = start_to_kill(ws, "build", "//pkg:all")
    try:
        deadline = time.monotonic() + CLI_TIMEOUT_S
        while subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True).returncode != 0:
            assert time.monotonic() < deadline and builder.poll() is None, "the evaluation never started"
            time.sleep(0.1)
        builder.send_signal(signum)
        builder.wait(timeout=CLI_TIMEOUT_S)
    finally:
        if builder.poll() is None:
            os.killpg(builder.pid, signal.SIGKILL)
    deadline = time.monotonic() + CLI_TIMEOUT_S  # SIGKILL: the step dies with its builder
    while subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "the evaluation outlived its builder"
        time.sleep(0.1)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_history_shows_what_a_stopped_build_published_and_was_running(make_workspace, signum):
    marker = f"{51 + signum}.75"  # a sleep no other test runs
    ws = make_workspace(_pipeline(marker))
    _stop_mid_step(ws, marker, signum)

    session = Session.open(ws, cwd=ws)
    [model] = attempts(session, "//pkg:model")
    [evaluation] = attempts(session, "//pkg:eval")
    assert model.status is AttemptStatus.SUCCEEDED
    ended = AttemptStatus.CANCELLED if signum == signal.SIGTERM else AttemptStatus.ABANDONED
    assert evaluation.status is ended

    rc, out, err = run_cli(ws, "history", "--json")
    assert rc == 0, err
    [build] = json.loads(out)
    assert build["result"] == ("interrupted" if signum == signal.SIGTERM else "abandoned")
    outcomes = {target["label"]: target for target in build["targets"]}
    assert outcomes["//pkg:model"]["status"] == "built" and outcomes["//pkg:model"]["key"] == model.key
    assert outcomes["//pkg:eval"]["status"] == ended.value
    assert outcomes["//pkg:eval"]["attempt"]["attempt"] == evaluation.attempt_id
    assert build["counts"]["built"] == 1 and build["counts"][ended.value] == 1

    rc, out, err = run_cli(ws, "history")
    assert "nothing done" not in out and f"{ended.value:8} //pkg:eval" in out and "built    //pkg:model" in out, out


def test_a_build_killed_outright_lists_what_it_found_cached_as_cached_not_pending(make_workspace):
    marker = "63.25"
    ws = make_workspace(_pipeline(marker, 'genrule(name = "data", outs = ["d.txt"], cmd = "echo tokens > $@")'))
    rc, out, err = run_cli(ws, "build", "--json", "//pkg:data")
    assert rc == 0, err
    [data] = json.loads(out)["targets"]
    _stop_mid_step(ws, marker, signal.SIGKILL)

    rc, out, err = run_cli(ws, "history", "--all", "--json")
    assert rc == 0, err
    killed = json.loads(out)[0]
    assert killed["result"] == "abandoned"
    outcomes = {target["label"]: target for target in killed["targets"]}
    assert outcomes["//pkg:data"]["status"] == "cached" and outcomes["//pkg:data"]["key"] == data["key"]
    assert killed["counts"]["cached"] == 1
    rc, out, err = run_cli(ws, "history")
    header, *rest = out.splitlines()
    listed = rest[: next(index for index, line in enumerate(rest) if not line.startswith(" "))]
    assert "abandoned" in header and not any("pending" in line or "//pkg:data" in line for line in listed), out
