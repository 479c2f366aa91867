"""A build can always be stopped: endless BUILD files, Ctrl-C and SIGTERM (DESIGN.md #9).

Before: a BUILD file with an endless loop hung `marinbuild` without a word and Ctrl-C
did nothing; SIGINT sent to the builder alone waited for the running step, and a second
one left the step's child process running.
"""

from __future__ import annotations

import signal
import subprocess
import time

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
    started = time.monotonic()
    rc, out, err = run_cli(ws, "build", "//pkg:x")
    assert rc == 2 and time.monotonic() - started < 30, err
    assert "pkg/BUILD.marin:" in err and "took longer than 1 s" in err and "load_timeout_s" in err
    rc, out, err = run_cli(ws, "query", "//pkg:all")
    assert rc == 2 and "took longer than 1 s" in err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_loading_stops_at_once_on_a_signal(make_workspace, signum):
    ws = make_workspace(ENDLESS)
    builder = start_cli(ws, "build", "//pkg:x")
    time.sleep(2.0)  # well into the loop (Python starts and imports in under a second)
    builder.send_signal(signum)
    started = time.monotonic()
    try:
        builder.wait(timeout=10)
    finally:
        builder.kill()
    assert time.monotonic() - started < 5
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
    assert time.monotonic() - started < 5, "the builder stops within a few seconds"
    assert builder.returncode == 130
    assert subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True).returncode != 0, "step killed"
    store = ws / "cache"
    [key] = [path.name for path in (store / "attempts").glob("*/*")]
    assert [record["status"] for record in attempt_records(store, key)] == ["cancelled"]
    assert LocalStore(store).lease_holder(layout.lock(key)) is None
    assert not (store / "ac").exists()
