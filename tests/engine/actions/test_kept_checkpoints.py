"""Kept states (issue #19, parts 2 and 3), on the engine alone: a step that keeps states
publishes each as an entry of its own while it runs, and what reads one runs then, before
the step ends; a step that fails afterwards, or is trained again, leaves the same bytes.

A toy rule stands for train_lm here (it counts, keeping the value at some steps), so
that what the scheduler does is checked in seconds; tests/rules/lm/test_wsd_cooldowns.py does it
with Levanter. The keeper waits, before it ends, for a file its reader writes: a build
that ends at all shows the reader ran while the keeper was running.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from conftest import build_json, cli_command, cli_env, keys, parse_json_output, run_cli, statuses
from helpers_kept_checkpoints import (
    QUIET,
    _build_file,
    _files,
    _show,
    _value,
    _where,
    assert_published_when_it_ended,
    kept_workspace,
)

from marinbuild.store.manifest import Manifest


def _stored_outputs(ws: Path, store: str | None, fake_gcs=None) -> list[str]:
    """Every object under the store's out/, as `out/<kk>/<key>/<path>`."""
    if store is None:
        root = ws / "cache"
        return sorted(path.relative_to(root).as_posix() for path in (root / "out").rglob("*") if path.is_file())
    fs = fake_gcs.fs()
    prefix = store.removeprefix("gs://") + "/"
    return sorted(path.removeprefix(prefix) for path in fs.find(f"{prefix}out"))


@pytest.mark.parametrize("remote", [False, True], ids=["local", "gcs"])
def test_a_reader_of_a_kept_state_runs_while_the_step_keeping_it_runs(make_workspace, tmp_path, request, remote):
    store = f"gs://{request.getfixturevalue('gcs_bucket')}/team" if remote else None
    ws = kept_workspace(make_workspace, tmp_path)
    built = build_json(ws, "--jobs", "3", "//p:all", store=store)  # ends only if read2 ran during count
    assert set(statuses(built).values()) == {"built"}, built["stderr"]
    assert "published its checkpoint at step 2" in built["stderr"]

    for label, value in (("//p:read2", "2\n"), ("//p:read_all", "5\n")):
        assert (_where(ws, label, store=store)[0] / "read.txt").read_text() == value
    # The kept state is an entry of its own, published by the keeper's running attempt; the
    # keeper's output leaves it out (the rule put it under checkpoints/step-2/ too).
    count = _show(ws, "//p:count", store)
    kept = count["checkpoints"]["2"]
    state = _show(ws, kept, store)
    assert state["label"] == "//p:count at step 2" and state["recipe"]["attrs"] == {"of": count["key"], "step": 2}
    assert _files(state) == _value("2\n") and set(_files(count)) == {"final.txt"}
    assert state["provenance"]["attempt"] is not None
    # Its bytes are in the store once: under the kept state's own key.
    fake = request.getfixturevalue("fake_gcs_server") if remote else None
    assert [path for path in _stored_outputs(ws, store, fake) if path.endswith("value.txt")] == [
        f"out/{kept[:2]}/{kept}/value.txt"
    ]
    # `where --step` and `show` say where it lives; `where` of the keeper says it is elsewhere.
    directory, _err = _where(ws, "--step", "2", "//p:count", store=store)
    assert (directory / "value.txt").read_text() == "2\n"
    assert count["checkpoint_outputs"] == {"2": state_dir(ws, store, kept)}
    rc, out, err = run_cli(ws, "show", "//p:count", store=store)
    assert rc == 0 and f"step 2  key {kept}  in {state_dir(ws, store, kept)}" in out, out + err
    _directory, note = _where(ws, "//p:count", store=store)
    assert "keeps checkpoints at steps 2, each an entry of its own" in note and "where --step 2 //p:count" in note
    # The reader's key holds the state's digest, and its record says where it came from.
    recorded = _show(ws, "//p:read2", store)["recipe"]["inputs"]["//p:count at step 2"]
    assert recorded["tree_digest"] == state["tree_digest"] and recorded["checkpoint_of"] == count["key"]

    again = build_json(ws, "//p:all", store=store)
    assert set(statuses(again).values()) == {"cached"}
    rc, out, err = run_cli(ws, "query", "deps(//p:read2)", store=store)
    assert rc == 0 and "//p:count" in out.split(), out + err
    # Rebuilt from the store alone, the reader's recipe finds the state it read again.
    rc, out, err = run_cli(ws, "rerun", keys(built)["//p:read2"], store=store)
    assert rc == 0 and "cached" in out, out + err
    # The report's pages say which checkpoints a step keeps and which one a step reads.
    rc, out, err = run_cli(ws, "report", "//p:all", "-o", str(tmp_path / "report"), store=store)
    assert rc == 0, err
    pages = "".join(path.read_text() for path in (tmp_path / "report").rglob("*.html"))
    assert (
        f"step 2 <code>{count['checkpoints']['2'][:12]}</code>" in pages and ">//p:count</a> keeps at step 2" in pages
    )


def state_dir(ws: Path, store: str | None, key: str) -> str:
    """Where the output of `key` lives in the store (`show`'s `checkpoint_outputs`)."""
    return f"{store}/out/{key[:2]}/{key}" if store else str(ws / "cache" / "out" / key[:2] / key)


def test_a_step_that_fails_after_keeping_a_state_leaves_the_same_bytes(make_workspace, tmp_path):
    ws = kept_workspace(make_workspace, tmp_path)
    (ws / "FAIL").touch()
    failed = build_json(ws, "--jobs", "3", "//p:all", expect_rc=1)
    assert statuses(failed) == {"//p:count": "failed", "//p:read2": "built", "//p:read_all": "skipped"}

    (ws / "FAIL").unlink()
    rebuilt = build_json(ws, "//p:all")
    assert statuses(rebuilt) == {"//p:count": "built", "//p:read2": "cached", "//p:read_all": "built"}
    count = _show(ws, "//p:count")
    state = _show(ws, count["checkpoints"]["2"])  # published by the failed attempt
    assert _files(state) == _value("2\n") and set(_files(count)) == {"final.txt"}

    # Trained again in another store: the same state, so the reader's key is the same.
    twin = kept_workspace(make_workspace, tmp_path, "twin")
    again = build_json(twin, "//p:all")
    assert keys(again)["//p:read2"] == keys(rebuilt)["//p:read2"]
    assert _show(twin, "//p:count")["checkpoints"]["2"] == count["checkpoints"]["2"]


def test_what_reruns_when_the_keeper_or_the_reader_changes(make_workspace, tmp_path):
    ws = kept_workspace(make_workspace, tmp_path)
    first = build_json(ws, "--jobs", "3", "//p:all")
    build = (ws / "p" / "BUILD.marin").read_text()
    # Run again aside, the keeper writes its state into its output again: compared with the
    # state's entry, as what it published under checkpoints/step-2/.
    rc, out, err = run_cli(ws, "rerun", "--check", keys(first)["//p:count"])
    assert rc == 0 and "matches the stored output" in out, out + err

    # Another reader leaves the keeper's key alone.
    (ws / "p" / "BUILD.marin").write_text(build + 'reader(name = "read4", src = ":count", step = 2)\n')
    dry = build_json(ws, "--dry-run", "//p:all")
    assert keys(dry)["//p:count"] == keys(first)["//p:count"]
    assert statuses(dry)["//p:count"] == "cached"

    # Keeping one more state is another recipe for the keeper, but the state at step 2 has
    # the same bytes: its reader keeps its key and stays cached (early cutoff). So does the
    # reader of the whole output, which holds no kept state: the same bytes as before.
    (ws / "p" / "BUILD.marin").write_text(_build_file(tmp_path / "ws-read", keep="[2, 3]"))
    more = build_json(ws, "--jobs", "3", "//p:all")
    assert statuses(more) == {"//p:count": "built", "//p:read2": "cached", "//p:read_all": "cached"}
    assert keys(more)["//p:count"] != keys(first)["//p:count"]
    assert _show(ws, "//p:count")["tree_digest"] == _show(ws, keys(first)["//p:count"])["tree_digest"]


def test_a_state_only_in_the_output_is_published_when_the_step_ends(make_workspace, tmp_path):
    ws = kept_workspace(make_workspace, tmp_path)
    (ws / "p" / "BUILD.marin").write_text(QUIET)
    assert_published_when_it_ended(ws, build_json(ws, "//p:all"))


@pytest.mark.parametrize(
    ("stray", "error"),
    [
        (
            False,
            "it keeps a checkpoint at step 1, but published none (ctx.publish_checkpoint) and left none under "
            "checkpoints/step-1/ of its output",
        ),
        (True, "checkpoints/notes.txt of the output is no state this step keeps (it keeps checkpoints/step-1/)"),
    ],
    ids=["state-missing", "stray-file"],
)
def test_a_step_that_leaves_a_kept_state_out_fails(make_workspace, tmp_path, stray, error):
    """A kept state neither published nor in the output, or something else under
    checkpoints/, fails the step: its readers are never left without the state."""
    ws = kept_workspace(make_workspace, tmp_path)
    (ws / "p" / "BUILD.marin").write_text(
        f'forgetful(name = "f", stray = {stray})\nreader(name = "rf", src = ":f", step = 1)\n'
    )
    failed = build_json(ws, "//p:all", expect_rc=1)
    assert statuses(failed) == {"//p:f": "failed", "//p:rf": "skipped"}
    assert failed["by_label"]["//p:f"]["reason"] == error
    assert not list((ws / "cache" / "ac").glob("*/*.json"))


def _damage(ws: Path, store: str | None, fake_gcs, key: str, damage: str) -> None:
    """Remove the entry of `key`, or corrupt it: on a local store its output's bytes (the
    same size), on GCS, where a look-up trusts a self-verifying entry, the entry itself."""
    if store is None:
        if damage == "removed":
            (ws / "cache" / "ac" / key[:2] / f"{key}.json").unlink()
        else:
            (ws / "cache" / "out" / key[:2] / key / "value.txt").write_text("9\n")
        return
    fs, root = fake_gcs.fs(), store.removeprefix("gs://")
    if damage == "removed":
        fs.rm(f"{root}/ac/{key[:2]}/{key}.json")
    else:
        fs.pipe_file(f"{root}/ac/{key[:2]}/{key}.json", b'{"key": "forged"}')


@pytest.mark.parametrize("damage", ["removed", "corrupt"])
@pytest.mark.parametrize("remote", [False, True], ids=["local", "gcs"])
def test_a_keeper_whose_kept_state_is_gone_or_corrupt_is_built_again(make_workspace, tmp_path, request, remote, damage):
    """The kept state lives in its entry only: without it the keeper's entry is no hit, and
    a build trains it again, publishing the state again; what reads it reads it right."""
    store = f"gs://{request.getfixturevalue('gcs_bucket')}/team" if remote else None
    fake = request.getfixturevalue("fake_gcs_server") if remote else None
    ws = kept_workspace(make_workspace, tmp_path)
    first = build_json(ws, "--jobs", "3", "//p:all", store=store)
    kept = _show(ws, "//p:count", store)["checkpoints"]["2"]
    _damage(ws, store, fake, kept, damage)

    dry = build_json(ws, "--dry-run", "//p:all", store=store)
    assert statuses(dry)["//p:count"] == "would-run"
    assert f"the checkpoint it kept at step 2 ({kept[:12]})" in dry["by_label"]["//p:count"]["reason"]

    again = build_json(ws, "--jobs", "3", "//p:all", store=store)
    assert statuses(again) == {"//p:count": "built", "//p:read2": "cached", "//p:read_all": "cached"}
    assert f"the checkpoint it kept at step 2 ({kept[:12]})" in again["stderr"] and "rebuilding it" in again["stderr"]
    assert keys(again) == keys(first)
    state = _show(ws, kept, store)
    assert _files(state) == _value("2\n") and state["provenance"]["attempt"] is not None
    assert (_where(ws, "--step", "2", "//p:count", store=store)[0] / "value.txt").read_text() == "2\n"
    assert (_where(ws, "//p:read2", store=store)[0] / "read.txt").read_text() == "2\n"
    assert set(statuses(build_json(ws, "//p:all", store=store)).values()) == {"cached"}


def test_an_output_made_when_it_held_its_kept_states_has_them_published_from_it(make_workspace, tmp_path):
    """Entries made before kept states left the output hold them under checkpoints/ and do
    not name them: a state whose entry is gone is published again from that output."""
    ws = kept_workspace(make_workspace, tmp_path)
    build_json(ws, "--jobs", "3", "//p:all")
    count = _show(ws, "//p:count")
    kept = count["checkpoints"]["2"]
    cache = ws / "cache"
    # Made as such an entry was: the state's files in the keeper's output, no names, and
    # (collected by a gc that did not know it) no entry of the state.
    entry_file = cache / "ac" / count["key"][:2] / f"{count['key']}.json"
    entry = json.loads(entry_file.read_text())
    (cache / "out" / count["key"][:2] / count["key"] / "checkpoints" / "step-2").mkdir(parents=True)
    (cache / "out" / count["key"][:2] / count["key"] / "checkpoints" / "step-2" / "value.txt").write_text("2\n")
    entry["files"] = sorted(
        [*entry["files"], {"path": "checkpoints/step-2/value.txt", "blake3": _value("2\n")["value.txt"], "size": 2}],
        key=lambda item: item["path"],
    )
    entry["tree_digest"] = Manifest.from_json(entry["files"]).tree_digest
    del entry["provenance"]["checkpoints"]
    entry_file.write_text(json.dumps(entry))
    (cache / "ac" / kept[:2] / f"{kept}.json").unlink()

    rebuilt = build_json(ws, "//p:read2")
    assert statuses(rebuilt) == {"//p:count": "cached", "//p:read2": "cached"}
    state = _show(ws, kept)
    assert _files(state) == _value("2\n") and state["provenance"]["attempt"] is None


@pytest.mark.parametrize(
    ("line", "message", "hint"),
    [
        (
            'reader(name = "r", src = ":count", step = 3)',
            "//p:r: //p:count keeps no checkpoint at step 3 (it keeps: 2)",
            "add 3 to keep of //p:count (p/BUILD.marin:2)",
        ),
        (
            'reader(name = "r", src = ":read_all", step = 2)',
            "//p:r: 'src' with 'step' reads a kept checkpoint, but //p:read_all is a reader target, which keeps none",
            "'src' names a counter target",
        ),
    ],
    ids=["step-not-kept", "not-a-keeper"],
)
def test_reading_a_state_that_is_not_kept_is_bad_input(make_workspace, tmp_path, line, message, hint):
    ws = kept_workspace(make_workspace, tmp_path)
    (ws / "p" / "BUILD.marin").write_text((ws / "p" / "BUILD.marin").read_text() + line + "\n")
    for command in (["build", "//p:r"], ["build", "--dry-run", "//p:all"]):
        rc, _out, err = run_cli(ws, *command)
        assert rc == 2 and f"p/BUILD.marin:5: {message}" in err and f"hint: {hint}" in err, err
    assert not (ws / "cache" / "ac").exists()


def _has_entry(ws: Path, key: str, store: str | None) -> bool:
    rc, _out, _err = run_cli(ws, "show", "--json", key, store=store)
    return rc == 0


@pytest.mark.parametrize("remote", [False, True], ids=["local", "gcs"])
def test_a_kept_state_lives_as_long_as_the_output_of_its_keeper(make_workspace, tmp_path, request, remote):
    store = f"gs://{request.getfixturevalue('gcs_bucket')}/team" if remote else None
    ws = kept_workspace(make_workspace, tmp_path)
    build_json(ws, "--jobs", "3", "//p:all", store=store)
    count = _show(ws, "//p:count", store)
    kept = count["checkpoints"]["2"]
    # The keeper's entry names the key of each state it keeps: gc keeps them with it.
    rc, out, err = run_cli(ws, "cache", "gc", "--grace", "0s", store=store)
    assert rc == 0 and "removed 0 keys" in out, out + err
    assert _has_entry(ws, kept, store)
    assert set(statuses(build_json(ws, "//p:all", store=store)).values()) == {"cached"}

    # Once the keeper's output goes (its recipe changed, and the newest build used the new
    # one), its kept state goes with it.
    time.sleep(1)  # a later second: of two builds in one second, gc keeps the keys of both
    (ws / "p" / "BUILD.marin").write_text(_build_file(tmp_path / "ws-read", steps=6))
    build_json(ws, "--jobs", "3", "//p:all", store=store)
    rc, out, err = run_cli(ws, "cache", "gc", "--grace", "0s", store=store)
    assert rc == 0, out + err
    assert not _has_entry(ws, count["key"], store) and not _has_entry(ws, kept, store)
    assert _has_entry(ws, _show(ws, "//p:count", store)["checkpoints"]["2"], store)


@pytest.mark.parametrize("remote", [False, True], ids=["local", "gcs"])
def test_gc_keeps_a_kept_state_that_a_running_step_reads(make_workspace, tmp_path, request, remote):
    """While the keeper still trains, no build record names its published state: the step
    reading it holds it, and a gc in the middle of that read removes nothing it reads."""
    store = f"gs://{request.getfixturevalue('gcs_bucket')}/team" if remote else None
    hold = tmp_path / "go"
    ws = kept_workspace(make_workspace, tmp_path, hold=str(hold))
    command = cli_command(ws, "build", "--json", "--jobs", "3", "//p:all", store=store)
    build = subprocess.Popen(command, cwd=ws, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not Path(f"{hold}.running").exists():  # the reader runs; the keeper waits for it
            assert build.poll() is None and time.monotonic() < deadline, build.communicate()
            time.sleep(0.05)
        rc, out, err = run_cli(ws, "cache", "gc", "--grace", "0s", store=store)
        assert rc == 0, out + err
    finally:
        hold.write_text("")
    out, err = build.communicate(timeout=120)
    assert build.returncode == 0, err
    assert set(statuses(parse_json_output(out)).values()) == {"built"}, err
    assert (Path(run_cli(ws, "where", "//p:read2", store=store)[1].strip()) / "read.txt").read_text() == "2\n"
    assert _has_entry(ws, _show(ws, "//p:count", store)["checkpoints"]["2"], store)
