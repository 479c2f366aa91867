"""Store errors are bad input, never tracebacks; a read-only store still serves what is
cached; `cache gc` removes what killed builders leave behind.

Before: a read-only store gave `OSError: [Errno 30]` even when every target was cached;
`--store` naming a file gave a FileExistsError traceback; staging directories of killed
builds stayed for ever.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import CLI_TIMEOUT_S, build_json, cli_env, run_cli, statuses

from marinbuild.actions.execution.hermetic import bwrap

FILES = {
    "pkg/BUILD.marin": """
        genrule(name = "a", outs = ["a.txt"], cmd = "echo a > $@")
        genrule(name = "b", srcs = [":a"], outs = ["b.txt"], cmd = "cat $< > $@")
    """,
}


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def _cli_with_read_only(ws: Path, store: Path, *args: str) -> tuple[int, str, str]:
    """The CLI with `store` mounted read-only (as root, permissions alone would not stop it)."""
    command = [str(bwrap()), "--bind", "/", "/", "--ro-bind", str(store), str(store), "--dev", "/dev"]
    command += ["--proc", "/proc", "--", sys.executable, "-m", "marinbuild", "--workspace", str(ws), *args]
    done = subprocess.run(command, cwd=ws, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=cli_env())
    return done.returncode, done.stdout, done.stderr


def test_store_naming_a_file_or_an_impossible_path_is_bad_input(make_workspace, tmp_path):
    ws = make_workspace(FILES)
    a_file = tmp_path / "not-a-directory"
    a_file.write_text("x")
    for store, expected in ((a_file, "is a file, not a directory"), (a_file / "store", "cannot be used")):
        rc, out, err = run_cli(ws, "build", "//pkg:a", store=str(store))
        assert rc == 2, err
        assert expected in err and str(a_file) in err and "hint:" in err and "Traceback" not in err, err


def test_a_fully_cached_build_on_a_read_only_store_writes_nothing(make_workspace):
    ws = make_workspace(FILES)
    store = ws / "cache"
    build_json(ws, "//pkg:all")
    before = _snapshot(store)

    rc, out, err = _cli_with_read_only(ws, store, "build", "//pkg:all")
    assert rc == 0, err
    assert "read-only" in err and "not recorded" in err and "Traceback" not in err
    for command in (["show", "//pkg:b"], ["history"], ["log", "//pkg:a"], ["query", "//pkg:all"]):
        rc, out, err = _cli_with_read_only(ws, store, *command)
        assert rc == 0, f"{command}: {err}"
    assert _snapshot(store) == before

    # A step that must run says which, and that it cannot publish.
    (ws / "pkg" / "BUILD.marin").write_text(
        'genrule(name = "a", outs = ["a.txt"], cmd = "echo A > $@")\n'
        'genrule(name = "b", srcs = [":a"], outs = ["b.txt"], cmd = "cat $< > $@")\n'
    )
    rc, out, err = _cli_with_read_only(ws, store, "build", "//pkg:all")
    assert rc == 2 and "//pkg:a must run" in err and "nothing could be published" in err, err
    assert "Traceback" not in err
    assert _snapshot(store) == before


def test_gc_removes_the_staging_of_killed_builders_and_stats_counts_it(make_workspace):
    cmd = "head -c 100000 /dev/zero > big; sleep 61.25"
    ws = make_workspace({"pkg/BUILD.marin": f'genrule(name = "slow", outs = ["o.txt"], cmd = "{cmd}")'})
    builder = subprocess.Popen(
        [sys.executable, "-m", "marinbuild", "--workspace", str(ws), "build", "//pkg:slow"],
        cwd=ws,
        env=cli_env(),
        stderr=subprocess.PIPE,
    )
    staging = ws / "cache" / "tmp"
    deadline = time.monotonic() + CLI_TIMEOUT_S
    while not list(staging.glob("*/work/big")):
        assert time.monotonic() < deadline and builder.poll() is None, "the step never started"
        time.sleep(0.1)
    # While it runs (lease held), gc keeps its staging whatever the grace period.
    rc, out, err = run_cli(ws, "cache", "gc", "--grace", "0s")
    assert rc == 0 and "staging directories" not in out and len(list(staging.iterdir())) == 1
    builder.send_signal(signal.SIGKILL)  # killed outright: nothing cleans up
    builder.wait()
    time.sleep(0.5)
    assert subprocess.run(["pgrep", "-f", "sleep 61.25"], capture_output=True).returncode != 0, "the step died too"
    (leftover,) = staging.iterdir()

    rc, out, err = run_cli(ws, "cache", "stats")
    assert rc == 0 and "1 staging directories left by killed builders" in out, out
    rc, out, err = run_cli(ws, "cache", "gc")  # the default grace period keeps a fresh one
    assert leftover.exists()
    old = time.time() - 30 * 86400
    for parent, _dirs, names in os.walk(leftover):
        for name in [*names, "."]:
            os.utime(Path(parent, name), (old, old))
    rc, out, err = run_cli(ws, "cache", "gc", "--dry-run")
    assert rc == 0 and "would remove 1 staging directories" in out and leftover.exists()
    rc, out, err = run_cli(ws, "cache", "gc")
    assert rc == 0 and "removed 1 staging directories left by killed builders" in out, out
    assert not leftover.exists()
    assert statuses(build_json(ws, "--keep-going", "--dry-run", "//pkg:slow")) == {"//pkg:slow": "would-run"}


def test_a_cached_build_on_a_bucket_this_account_may_only_read(make_workspace, fake_gcs_server, gcs_bucket):
    """A GCS endpoint that answers 403 to every write, as GCS does for a reader's account."""
    from helpers_faults import FaultyProxy

    ws = make_workspace(FILES)
    store = f"gs://{gcs_bucket}/team"
    build_json(ws, "//pkg:all", store=store)
    fs = fake_gcs_server.fs()
    before = sorted(fs.find(f"{gcs_bucket}/team"))
    proxy = FaultyProxy(fake_gcs_server.url, refuse=lambda method, path: None if method == "GET" else 403)
    reader = {**cli_env(), "STORAGE_EMULATOR_HOST": proxy.url}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "marinbuild", "--workspace", str(ws), "build", "//pkg:all", "--store", store],
            cwd=ws,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            env=reader,
        )
        assert done.returncode == 0, done.stderr
        assert "read-only for this account" in done.stderr and "not recorded" in done.stderr
        (ws / "pkg" / "BUILD.marin").write_text('genrule(name = "a", outs = ["a.txt"], cmd = "echo A > $@")\n')
        done = subprocess.run(
            [sys.executable, "-m", "marinbuild", "--workspace", str(ws), "build", "//pkg:a", "--store", store],
            cwd=ws,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            env=reader,
        )
        assert done.returncode == 2 and "//pkg:a must run" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    finally:
        proxy.close()
    assert proxy.refused, "writes were attempted and refused"
    fs.invalidate_cache()
    assert sorted(fs.find(f"{gcs_bucket}/team")) == before
