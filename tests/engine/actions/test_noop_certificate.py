"""The no-op certificate (marinbuild/actions/bookkeeping/noop_certificate.py) never answers differently
from the full check.

Each test builds a workspace until a no-op is certified, changes one thing the full path
reads, and builds it twice: here with certificates, and in a copy made before the change
with them turned off (`MARINBUILD_NOOP_CERTIFICATE=0`). Both must report the same status
and key for every target, and the certificate must not have answered (the invocation
record says when it did). Untouched, the next no-op is answered by it, and prints and
records what the full path prints and records. Nothing here is timed.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from helpers_audit import backdate, bytecode_env, run_untraced
from helpers_memo import MEMO_CONFIG, MEMO_FILES

from marinbuild.actions.bookkeeping.noop_certificate import NOOP_CERTIFICATE_ENV, Certifying
from marinbuild.consulted import Consulted, recording
from marinbuild.hashing import RACY_NS

pytestmark = pytest.mark.usefixtures("settled_bytecode")  # else a fresh checkout's first no-op is not certified

PER_INVOCATION = {"id", "pid", "started", "duration_s", "noop_certificate"}


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    (tmp_path / "input-1.txt").write_text("one\n")
    return {**bytecode_env(), "MEMO_TEST_INPUT": str(tmp_path / "input-1.txt")}


def build(ws: Path, env: dict[str, str], *options: str) -> tuple[dict[str, tuple[str, str]], dict, str]:
    """({label: (status, key)}, the invocation record, stdout) of `build --json //...`."""
    done = run_untraced(ws, "build", "--json", *options, "//...", env=env)
    targets = {item["label"]: (item["status"], item["key"]) for item in json.loads(done.stdout)["targets"]}
    return targets, newest_record(ws), done.stdout


def newest_record(ws: Path) -> dict:
    records = sorted(path for path in (ws / "cache/invocations").glob("*.json"))
    return json.loads(records[-1].read_text())


def without_certificates(env: dict[str, str]) -> dict[str, str]:
    return {**env, NOOP_CERTIFICATE_ENV: "0"}


@pytest.fixture
def certified(make_workspace, env, tmp_path) -> Path:
    """A workspace whose no-op is certified: built, backdated with the input outside it
    (nothing it reads is then in the racy window), and built again, which certifies it."""
    ws = make_workspace(MEMO_FILES, config=MEMO_CONFIG)
    run_untraced(ws, "build", "--json", "//...", env=env)
    backdate(tmp_path)
    run_untraced(ws, "build", "--json", "//...", env=env)
    assert list((ws / ".marinbuild/noop").glob("*.pickle"))
    return ws


def test_an_untouched_workspace_is_answered_by_its_certificate_as_the_full_path_answers(certified, env):
    full_targets, full_record, full_stdout = build(certified, without_certificates(env))
    targets, record, stdout = build(certified, env)
    assert record.get("noop_certificate") is True and "noop_certificate" not in full_record
    assert targets == full_targets and set(status for status, _ in targets.values()) == {"cached"}
    assert stdout == full_stdout  # byte for byte: every duration of a hit is 0
    assert {k: v for k, v in record.items() if k not in PER_INVOCATION} == {
        k: v for k, v in full_record.items() if k not in PER_INVOCATION
    }
    events = [
        {k: v for k, v in json.loads(line).items() if k not in ("time", "elapsed_s")}
        for invocation in (record, full_record)
        for line in (certified / f"cache/invocations/{invocation['id']}.events.jsonl").read_text().splitlines()
    ]
    assert events[: len(events) // 2] == events[len(events) // 2 :]


def _edit(relative: str, old: str, new: str):
    def change(ws: Path, env: dict[str, str]) -> None:
        path = ws / relative
        path.write_text(path.read_text().replace(old, new))

    return change


def _write(relative: str, text: str):
    def change(ws: Path, env: dict[str, str]) -> None:
        (ws / relative).parent.mkdir(parents=True, exist_ok=True)
        (ws / relative).write_text(text)

    return change


def _delete_store(pattern: str):
    def change(ws: Path, env: dict[str, str]) -> None:
        found = sorted((ws / "cache").glob(pattern))
        assert found
        found[0].unlink()

    return change


def _edit_external_input(ws: Path, env: dict[str, str]) -> None:
    Path(env["MEMO_TEST_INPUT"]).write_text("two\n")


def _rename_external_input(ws: Path, env: dict[str, str]) -> None:
    other = Path(env["MEMO_TEST_INPUT"]).with_name("input-2.txt")
    other.write_text("two\n")
    env["MEMO_TEST_INPUT"] = str(other)


def _unrelated_variable(ws: Path, env: dict[str, str]) -> None:
    env["SOME_UNRELATED_VARIABLE"] = "1"


CHANGES = {
    "a BUILD file edited": _edit("p/BUILD.marin", '"hi"', '"ho"'),
    "a BUILD file reformatted": _edit("p/BUILD.marin", "\n", "\n\n"),
    "a BUILD file in a new package": _write(
        "r/BUILD.marin", 'genrule(name = "r", outs = ["r.txt"], cmd = "echo r > $@")\n'
    ),
    "a file added to a package a glob reads": _write("p/b.txt", "b\n"),
    "a file added to a directory no glob reads": _write("lib/notes.txt", "notes\n"),
    "a loaded .star file edited": _edit("lib/macros.star", "wc -c", "wc -l"),
    "a rule module's helper edited": _edit("myrules/checks.py", "forbidden'", "forbidden!'"),
    "a rule module edited": _edit("myrules/defs.py", 'default=""', 'default="!"'),
    "a source edited": _edit("p/a.txt", "a", "A"),
    "an input outside the workspace edited": _edit_external_input,
    "the variable naming an input outside the workspace changed": _rename_external_input,
    "an unrelated environment variable set": _unrelated_variable,
    "a workspace setting changed": _edit("marinbuild.toml", "rules =", 'ignore = ["q"]\nrules ='),
    "an entry deleted": _delete_store("ac/*/*.json"),
    "an output file deleted": _delete_store("out/*/*/*.txt"),
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_after_a_change_both_paths_agree_and_the_certificate_does_not_answer(certified, env, tmp_path, change):
    copy = tmp_path / "copy"
    shutil.copytree(certified, copy, symlinks=True)
    copy_env = without_certificates(env)
    CHANGES[change](certified, env)
    CHANGES[change](copy, copy_env)
    targets, record, _ = build(certified, env)
    full_targets, _, _ = build(copy, copy_env)
    assert targets == full_targets
    assert "noop_certificate" not in record


def test_a_new_shell_or_login_is_still_answered_by_the_certificate(certified, env):
    """Another directory before the last `cd`, shell depth or ssh connection: the shell's
    bookkeeping, which no build decides from, is not part of a certificate's context (any
    other variable is: an unrelated one set above is not answered)."""
    session = {**env, "OLDPWD": "/elsewhere", "SHLVL": "7", "SSH_CONNECTION": "127.0.0.1 50000 127.0.0.1 22"}
    full_targets, _, full_stdout = build(certified, without_certificates(session))
    targets, record, stdout = build(certified, session)
    assert record.get("noop_certificate") is True
    assert targets == full_targets and stdout == full_stdout


def test_another_option_is_not_answered_by_the_certificate(certified, env):
    full_targets, _, _ = build(certified, without_certificates(env), "--keep-going")
    targets, record, _ = build(certified, env, "--keep-going")
    assert targets == full_targets and "noop_certificate" not in record
    targets, record, _ = build(certified, env)  # the certificate of the plain command is still there
    assert record.get("noop_certificate") is True and targets == full_targets


def test_a_change_then_settled_is_certified_again(certified, env, tmp_path):
    CHANGES["a source edited"](certified, env)
    changed, record, _ = build(certified, env)
    assert "noop_certificate" not in record and changed["//p:all"][0] == "built"
    backdate(tmp_path)
    build(certified, env)  # the full path, which certifies what it found
    targets, record, _ = build(certified, env)
    assert record.get("noop_certificate") is True
    assert {label: key for label, (_, key) in targets.items()} == {label: key for label, (_, key) in changed.items()}


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage"])
def test_a_damaged_certificate_falls_back_to_the_full_path(certified, env, damage):
    certificate = next((certified / ".marinbuild/noop").glob("*.pickle"))
    data = certificate.read_bytes()
    certificate.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"\x80\x05junk"}[damage])
    full_targets, _, _ = build(certified, without_certificates(env))
    targets, record, _ = build(certified, env)
    assert targets == full_targets and "noop_certificate" not in record
    _, record, _ = build(certified, env)  # the full path wrote it again
    assert record.get("noop_certificate") is True


def test_a_build_within_the_racy_window_writes_no_certificate(make_workspace, env):
    """Right after the files were written, a signature could miss a change made in the same
    timestamp tick: the full path runs until they settle."""
    ws = make_workspace(MEMO_FILES, config=MEMO_CONFIG)
    run_untraced(ws, "build", "--json", "//...", env=env)
    _, record, _ = build(ws, env)
    assert "noop_certificate" not in record
    assert not list((ws / ".marinbuild/noop").glob("*.pickle"))


def test_a_build_with_an_external_artifact_is_never_certified(make_workspace, tmp_path):
    """An external artifact's pin is checked against what its URL holds now (a bucket's
    listing, not a file of this machine): no certificate answers for it."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.jsonl").write_text('{"text": "alpha"}\n')
    ws = make_workspace(
        {
            "pkg/BUILD.marin": f'external(name = "data", url = "{data}")\n'
            'genrule(name = "count", srcs = [":data"], outs = ["n.txt"], cmd = "cat $(SRCS) | wc -c > $@")\n'
        }
    )
    env = bytecode_env()
    run_untraced(ws, "pin", "//pkg:data", env=env)
    run_untraced(ws, "build", "--json", "//...", env=env)
    backdate(tmp_path)
    for _ in range(2):
        targets, record, _ = build(ws, env)
        assert targets["//pkg:data"][0] == "pinned" and targets["//pkg:count"][0] == "cached"
        assert "noop_certificate" not in record
    assert not list((ws / ".marinbuild/noop").glob("*.pickle"))


def test_recording_ends_at_the_first_step_run_or_file_modified_within_the_racy_window(tmp_path):
    """What a build consults is kept only while it can still be certified: the first step
    it runs (a cold build of 100,000 targets would otherwise keep every path its steps'
    staging touched) or the first file seen modified within the racy window ends it, and
    drops what was kept."""
    old, fresh = tmp_path / "old.txt", tmp_path / "fresh.txt"
    for path in (old, fresh):
        path.write_text(path.name)
    long_ago = os.stat(old).st_mtime_ns - 10 * RACY_NS
    os.utime(old, ns=(long_ago, long_ago))

    now = time.time_ns()  # not the process's start: a test worker may have started long before
    ran = Consulted(horizon_ns=now)
    with recording(ran):
        os.stat(old)
        assert ran.settled and str(old) in ran.followed
        Certifying(ran).step_started("//p:a")
        old.read_text()
    assert not ran.settled and ran.followed == {} and ran.links == {}

    racy = Consulted(horizon_ns=now)
    with recording(racy):
        os.stat(old)
        os.stat(fresh)
        os.lstat(old)
    assert not racy.settled and racy.followed == {} and racy.links == {}
