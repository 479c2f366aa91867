"""A build can always be stopped: endless BUILD files, Ctrl-C and SIGTERM (docs/guarantees.md).

Before: a BUILD file with an endless loop hung `marinbuild` without a word and Ctrl-C
did nothing; SIGINT sent to the builder alone waited for the running step, and a second
one left the step's child process running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import CLI_TIMEOUT_S, attempt_records, run_cli, start_cli

from marinbuild.store import LocalStore, layout

ENDLESS = {
    "pkg/BUILD.marin": """
        def spin():
            n = 0
            for i in range(100000):
                for j in range(100000):
                    n += 1
            return n

        genrule(name = "x", outs = ["x.txt"], cmd = "echo %d > $@" % spin())
    """,
}


def test_an_endless_build_file_stops_at_the_load_limit(make_workspace):
    ws = make_workspace(ENDLESS, config="load_timeout_s = 1\n")
    rc, out, err = run_cli(ws, "build", "//pkg:x")  # the loop never ends: only the limit ends it
    assert rc == 2, err
    assert "pkg/BUILD.marin:" in err and "took longer than 1 s" in err and "load_timeout_s" in err
    rc, out, err = run_cli(ws, "query", "//pkg:all")
    assert rc == 2 and "took longer than 1 s" in err


def _wait_for_cpu_time(process: subprocess.Popen, seconds: float) -> None:
    """Until `process` has used `seconds` of CPU time: a point in its work that a busy
    machine delays but does not move, as a wall-clock sleep would."""
    ticks = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + CLI_TIMEOUT_S
    while True:
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        if (int(fields[11]) + int(fields[12])) / ticks >= seconds:  # utime and stime
            return
        assert time.monotonic() < deadline and process.poll() is None, "the process ended or never got the CPU"
        time.sleep(0.1)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_loading_stops_at_once_on_a_signal(make_workspace, signum):
    ws = make_workspace(ENDLESS)
    builder = start_cli(ws, "build", "//pkg:x")
    _wait_for_cpu_time(builder, 3.0)  # well into the loop: start-up and imports take under a second of CPU
    builder.send_signal(signum)
    try:
        builder.wait(timeout=CLI_TIMEOUT_S)  # the loop never ends: only the signal ends it
    finally:
        builder.kill()
    assert builder.returncode == 130 and "interrupted" in builder.stderr.read()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_builder_alone_stops_its_steps_and_releases_their_leases(make_workspace, signum):
    marker = f"{37 + signum}.25"  # a sleep no other test runs, to find leftovers
    cmd = f"echo started; sleep {marker}; echo > $@"
    ws = make_workspace({"pkg/BUILD.marin": f'genrule(name = "slow", outs = ["o.txt"], cmd = "{cmd}")'})
    builder = start_cli(ws, "build", "//pkg:slow")
    deadline = time.monotonic() + CLI_TIMEOUT_S
    while subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True).returncode != 0:
        assert time.monotonic() < deadline and builder.poll() is None, "the step never started"
        time.sleep(0.1)
    builder.send_signal(signum)  # to the builder's process only, not its group
    started = time.monotonic()
    try:
        builder.wait(timeout=CLI_TIMEOUT_S)
    finally:
        builder.kill()
    assert time.monotonic() - started < 30, "the builder stopped its step, not waited for its sleep to end"
    assert builder.returncode == 130
    assert subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True).returncode != 0, "step killed"
    store = ws / "cache"
    [key] = [path.name for path in (store / "attempts").glob("*/*")]
    assert [record["status"] for record in attempt_records(store, key)] == ["cancelled"]
    assert LocalStore(store).lease_holder(layout.lock(key)) is None
    assert not (store / "ac").exists()
