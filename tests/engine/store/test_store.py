"""The store: its primitives (create-only, atomic replace, leases) and what a build leaves in it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import blake3
import pytest
from conftest import (
    CLI_TIMEOUT_S,
    ac_entries,
    attempt_records,
    build_json,
    cli_env,
    entry_path,
    entry_problems,
    output_text,
    run_cli,
    statuses,
    store_files,
)

from marinbuild.errors import StoreError
from marinbuild.store import LocalStore, open_store, store_salt
from marinbuild.store.manifest import hash_tree


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# -- LocalStore primitives --------------------------------------------------------------------


def test_create_only_never_overwrites(tmp_path):
    store = LocalStore(tmp_path / "s")
    assert store.read_bytes("ac/ab/x.json") is None
    assert not store.exists("ac/ab/x.json")
    assert store.create_only("ac/ab/x.json", b"first") is True
    assert store.create_only("ac/ab/x.json", b"second") is False
    assert store.read_bytes("ac/ab/x.json") == b"first"
    assert sorted(os.listdir(tmp_path / "s" / "ac" / "ab")) == ["x.json"], "temporary files left behind"


def test_create_only_race_has_one_winner(tmp_path):
    store = LocalStore(tmp_path / "s")
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def create(i: int) -> None:
        barrier.wait()
        results.append(store.create_only("ac/00/k.json", f"writer {i}".encode()))

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False] * 7 + [True]
    assert store.read_bytes("ac/00/k.json").startswith(b"writer ")


def test_write_bytes_replaces_and_leaves_no_temporaries(tmp_path):
    store = LocalStore(tmp_path / "s")
    store.write_bytes("attempts/aa/k/1.json", b"running")
    store.write_bytes("attempts/aa/k/1.json", b"done")
    assert store.read_bytes("attempts/aa/k/1.json") == b"done"
    assert os.listdir(tmp_path / "s" / "attempts" / "aa" / "k") == ["1.json"]


def test_list_delete_put(tmp_path):
    store = LocalStore(tmp_path / "s")
    store.write_bytes("a/1", b"1")
    store.write_bytes("a/b/2", b"2")
    (tmp_path / "s" / "a" / ".3.abc.tmp").write_bytes(b"partial")
    assert store.list("a") == ["a/1", "a/b/2"]
    store.delete("a/b")
    store.delete("a/missing")  # absent is fine
    assert store.list("a") == ["a/1"]

    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "f.txt").write_text("new")
    store.write_bytes("out/xx/k/leftover.txt", b"from a crashed attempt")
    store.put_dir(staged, "out/xx/k", hash_tree(staged))
    assert store.list("out/xx/k") == ["out/xx/k/f.txt"]
    assert not staged.exists()

    log = tmp_path / "log.txt"
    log.write_text("log")
    store.put_file(log, "attempts/xx/k/1.log")
    assert store.read_bytes("attempts/xx/k/1.log") == b"log"


def test_lease_is_exclusive(tmp_path):
    store = LocalStore(tmp_path / "s")
    events: list[tuple[str, float]] = []

    def hold(name: str) -> None:
        with store.lease("locks/ab/k.lock"):
            events.append((f"{name} in", time.monotonic()))
            time.sleep(0.2)
            events.append((f"{name} out", time.monotonic()))

    threads = [threading.Thread(target=hold, args=(name,)) for name in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    names = [name for name, _ in sorted(events, key=lambda event: event[1])]
    assert names in (["one in", "one out", "two in", "two out"], ["two in", "two out", "one in", "one out"])


def test_lease_of_a_killed_holder_is_released(tmp_path):
    root = tmp_path / "s"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from marinbuild.store import LocalStore\n"
            f"with LocalStore(Path({str(root)!r})).lease('locks/ab/k.lock'):\n"
            "    print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        acquired = threading.Event()

        def take() -> None:
            with LocalStore(root).lease("locks/ab/k.lock"):
                acquired.set()

        thread = threading.Thread(target=take, daemon=True)
        thread.start()
        assert not acquired.wait(0.3), "the lease was taken while another process held it"
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        assert acquired.wait(10), "a SIGKILLed holder must not leave the lease taken"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_open_store_urls(tmp_path):
    assert isinstance(open_store(str(tmp_path / "a"), tmp_path / "local"), LocalStore)
    assert open_store(f"file://{tmp_path}/b", tmp_path / "local").local_path("x") == tmp_path / "b" / "x"
    with pytest.raises(StoreError):
        open_store("nosuchscheme://example.com/store", tmp_path / "local")
    # Opening writes nothing.
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_store_metadata_salt_and_format(tmp_path):
    root = tmp_path / "s"
    store = LocalStore(root)
    assert store_salt(store) == ""
    root.mkdir()
    (root / "store.json").write_text('{"format": 1, "salt": "s1"}')
    assert store_salt(store) == "s1"
    (root / "store.json").write_text('{"format": 99, "salt": ""}')
    with pytest.raises(StoreError):
        store_salt(store)
    (root / "store.json").write_text("not json")
    with pytest.raises(StoreError):
        store_salt(store)


def test_unusable_store_metadata_is_bad_input_on_the_cli(make_workspace):
    ws = make_workspace({"pkg/BUILD.marin": 'genrule(name = "g", outs = ["g.txt"], cmd = "echo g > $@")\n'})
    build_json(ws, "//pkg:g")
    (ws / "cache" / "store.json").write_text('{"format": 99}')
    rc, out, err = run_cli(ws, "build", "//pkg:g")
    assert rc == 2 and "store format" in err


# -- what a build leaves in the store -----------------------------------------------------------

BUILD = """\
    genrule(name = "lib", srcs = ["data.txt"], outs = ["lib.txt", "nested/deep/more.txt"],
            cmd = "cat $< > $(RULEDIR)/lib.txt; echo more > $(RULEDIR)/nested/deep/more.txt")
    genrule(name = "app", srcs = [":lib"], outs = ["app.txt"], cmd = "cat $(SRCS) > $@")
    """


def test_store_layout_after_a_build(make_workspace):
    ws = make_workspace({"pkg/BUILD.marin": BUILD, "pkg/data.txt": "data\n"})
    store = ws / "cache"
    result = build_json(ws, "//pkg:all")
    assert json.loads((store / "store.json").read_text())["format"] == 1
    for label in ("//pkg:lib", "//pkg:app"):
        key = result["by_label"][label]["key"]
        entry_file = entry_path(store, key)
        assert entry_file.is_file()
        entry = json.loads(entry_file.read_text())
        assert entry["key"] == key and entry["label"] == label
        assert entry_problems(store, entry_file) == []
        # The manifest lists exactly the files in the output directory.
        output = store / "out" / key[:2] / key
        assert Path(result["by_label"][label]["output"]) == output
        on_disk = sorted(p.relative_to(output).as_posix() for p in output.rglob("*") if p.is_file())
        assert [item["path"] for item in entry["files"]] == on_disk
        # The tree digest is the digest of the canonical manifest.
        assert entry["tree_digest"] == blake3.blake3(_canonical(entry["files"]).encode()).hexdigest()
        # The key is the digest of the canonical recipe, and the recipe names no target and no path.
        assert blake3.blake3(_canonical(entry["recipe"]).encode()).hexdigest() == key
        recipe_text = json.dumps(entry["recipe"])
        assert str(ws) not in recipe_text and "//pkg" not in recipe_text
        [record] = attempt_records(store, key)
        assert record["status"] == "succeeded" and record["attempt"] == entry["attempt"]
    lib_entry = json.loads(entry_path(store, result["by_label"]["//pkg:lib"]["key"]).read_text())
    assert [item["path"] for item in lib_entry["files"]] == ["lib.txt", "nested/deep/more.txt"]
    assert output_text(result, "//pkg:app", "app.txt") == "data\nmore\n"
    assert not [path for path in store_files(store) if path.startswith("tmp/")], "staging left behind"


def test_symlink_outputs_are_refused(make_workspace, tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("outside the store\n")
    ws = make_workspace({"pkg/BUILD.marin": f'genrule(name = "link", outs = ["l.txt"], cmd = "ln -s {target} $@")\n'})
    result = build_json(ws, "//pkg:link", expect_rc=1)
    assert statuses(result) == {"//pkg:link": "failed"}
    assert "symlink" in result["by_label"]["//pkg:link"]["reason"]
    assert ac_entries(ws / "cache") == []


def test_entry_whose_tree_digest_disagrees_with_its_manifest_is_not_trusted(make_workspace):
    """A dependent's key is made of the entry's tree digest: a damaged one must not be served."""
    ws = make_workspace({"pkg/BUILD.marin": BUILD, "pkg/data.txt": "data\n"})
    store = ws / "cache"
    first = build_json(ws, "//pkg:all")
    entry_file = entry_path(store, first["by_label"]["//pkg:lib"]["key"])
    entry = json.loads(entry_file.read_text())
    digest = entry["tree_digest"]
    entry["tree_digest"] = ("1" if digest[0] != "1" else "2") + digest[1:]  # one flipped character
    entry_file.write_text(json.dumps(entry))

    second = build_json(ws, "//pkg:all")
    warnings = [line for line in second["stderr"].splitlines() if "WARNING" in line]
    assert any("//pkg:lib" in line for line in warnings), second["stderr"]
    assert statuses(second) == {"//pkg:lib": "built", "//pkg:app": "cached"}
    assert second["by_label"]["//pkg:app"]["key"] == first["by_label"]["//pkg:app"]["key"]


def test_entry_with_another_versions_tree_digest_gives_no_wrong_answer(make_workspace):
    """An entry edited to carry the tree digest of an older output must not make a dependent
    serve the output it built from that older version."""
    ws = make_workspace({"pkg/BUILD.marin": BUILD, "pkg/data.txt": "version one\n"})
    store = ws / "cache"
    one = build_json(ws, "//pkg:all")
    old_digest = json.loads(entry_path(store, one["by_label"]["//pkg:lib"]["key"]).read_text())["tree_digest"]
    (ws / "pkg" / "data.txt").write_text("version two\n")
    two = build_json(ws, "//pkg:all")
    assert output_text(two, "//pkg:app", "app.txt") == "version two\nmore\n"

    entry_file = entry_path(store, two["by_label"]["//pkg:lib"]["key"])
    entry = json.loads(entry_file.read_text())
    entry_file.write_text(json.dumps({**entry, "tree_digest": old_digest}))

    three = build_json(ws, "//pkg:all")
    assert output_text(three, "//pkg:lib", "lib.txt") == "version two\n"
    assert output_text(three, "//pkg:app", "app.txt") == "version two\nmore\n", statuses(three)


def test_a_builder_waiting_for_a_running_key_shows_its_log(make_workspace, monkeypatch):
    """Two builds of the same slow step on one machine: the second says that another
    builder holds the key, prints the holder's log lines as they come, then gets a hit."""
    monkeypatch.setenv("MARINBUILD_SYNC_S", "1")
    ws = make_workspace(
        {
            "pkg/BUILD.marin": (
                "genrule(name = 'slow', outs = ['o.txt'], "
                "cmd = 'for i in 1 2 3 4 5 6; do echo tick-$$i; sleep 0.5; done; echo > $@')\n"
            )
        }
    )

    def builder() -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "marinbuild", "--workspace", str(ws), "build", "--json", "//pkg:slow"],
            cwd=ws,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
        )

    first = builder()
    deadline = time.monotonic() + 30
    while not list((ws / "cache" / "attempts").rglob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    second = builder()
    out, err = second.communicate(timeout=CLI_TIMEOUT_S)
    first.communicate(timeout=CLI_TIMEOUT_S)
    assert second.returncode == 0, err
    assert "another builder on this machine holds it" in err
    assert "//pkg:slow | [attempt" in err and "tick-" in err, err
    assert statuses(json.loads(out)) == {"//pkg:slow": "cached"}
