"""`marinbuild cache verify | gc | stats`, on a local store and on a GCS store."""

from __future__ import annotations

import time

import pytest
from conftest import build_json, keys, run_cli, statuses, write_files

from marinbuild.provenance.in_use import workspaces_in_use
from marinbuild.store import layout, open_store
from marinbuild.store.records import Records

BUILD = """\
    genrule(name = "a", outs = ["a.txt", "b.txt"], cmd = "echo {a} > $(RULEDIR)/a.txt; echo beta > $(RULEDIR)/b.txt")
    genrule(name = "c", srcs = [":a"], outs = ["c.txt"], cmd = "cat $(SRCS) > $@")
    genrule(name = "kept", outs = ["k.txt"], cmd = "echo {kept} > $@", tags = ["manual"])
    """


@pytest.fixture(params=["local", "gcs"])
def store_url(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "store")
    bucket = request.getfixturevalue("gcs_bucket")
    return f"gs://{bucket}/cache"


def _store(url: str, tmp_path):
    return open_store(url, tmp_path / "local")


def test_verify_reports_every_mismatch(make_workspace, store_url, tmp_path):
    ws = make_workspace({"pkg/BUILD.marin": BUILD.format(a="alpha", kept="k")})
    built = build_json(ws, "//pkg:all", store=store_url)
    rc, out, err = run_cli(ws, "cache", "verify", store=store_url)
    assert rc == 0 and "verified 2 entries" in out and "0 mismatches" in out, out + err

    store = _store(store_url, tmp_path)
    key = keys(built)["//pkg:a"]
    store.write_bytes(f"{layout.output(key)}/a.txt", b"alphA\n")  # a flipped byte, same size
    store.delete(f"{layout.output(key)}/b.txt")
    rc, out, err = run_cli(ws, "cache", "verify", "//pkg:a", store=store_url)
    assert rc == 1 and "verified 1 entries" in out and "2 mismatches" in out, out + err
    assert "MISMATCH //pkg:a" in out and "a.txt does not match" in out and "b.txt is missing" in out
    assert "quarantined 1 entries" in out
    rc, out, err = run_cli(ws, "cache", "verify", store=store_url)
    assert rc == 0 and "verified 1 entries" in out and "0 mismatches" in out, out + err  # a's is aside

    again = build_json(ws, "//pkg:all", store=store_url)
    assert statuses(again)["//pkg:a"] == "built"
    rc, out, err = run_cli(ws, "cache", "verify", store=store_url)
    assert rc == 0, out + err


def test_gc_removes_exactly_the_dead_entries(make_workspace, store_url, tmp_path):
    ws = make_workspace({"pkg/BUILD.marin": BUILD.format(a="one", kept="k1")})
    old = build_json(ws, "//pkg:all", "//pkg:kept", store=store_url)
    pinned_ws = make_workspace({"pkg/BUILD.marin": BUILD.format(a="pinned", kept="k1")})
    pinned = keys(build_json(pinned_ws, "//pkg:a", store=store_url))["//pkg:a"]
    store = _store(store_url, tmp_path)
    store.write_bytes(layout.pin(pinned), b"kept for the paper\n")
    write_files(ws, {"pkg/BUILD.marin": BUILD.format(a="two", kept="k1")})
    time.sleep(1)  # a later second: of two builds in one second, gc keeps the keys of both
    new = build_json(ws, "//pkg:all", store=store_url)
    dead = {keys(old)["//pkg:a"], keys(old)["//pkg:c"]}
    live = set(keys(new).values()) | {keys(old)["//pkg:kept"], pinned}
    assert not dead & live

    rc, out, err = run_cli(ws, "cache", "gc", "--dry-run", store=store_url)
    assert rc == 0 and "would remove 0 keys" in out, out + err  # everything is younger than 7 days

    before = store.list("")
    rc, out, err = run_cli(ws, "cache", "gc", "--dry-run", "--grace", "0s", store=store_url)
    assert rc == 0, err
    assert "would remove 2 keys" in out and "//pkg:" in out, out
    assert store.list("") == before

    rc, out, err = run_cli(ws, "cache", "gc", "--grace", "0s", store=store_url)
    assert rc == 0 and "removed 2 keys" in out, out + err
    # Lock files stay: deleting one that a builder is about to lock would let two hold it.
    remaining = {layout.key_of(path) for path in store.list("") if not path.startswith("locks/")} - {None}
    assert not remaining & dead
    # The label index points at attempts of live keys only.
    indexed = {path.rsplit(".", 1)[-1] for path in store.list("labels")}
    assert indexed and not indexed & dead and indexed <= live
    assert live <= remaining
    assert set(statuses(build_json(ws, "//pkg:all", "//pkg:kept", store=store_url)).values()) == {"cached"}

    rc, out, err = run_cli(ws, "cache", "stats", store=store_url)
    assert rc == 0 and "4 entries" in out and "ac/" in out, out + err


def test_gc_grace_is_a_duration(make_workspace, tmp_path):
    ws = make_workspace({"pkg/BUILD.marin": BUILD.format(a="x", kept="y")})
    rc, out, err = run_cli(ws, "cache", "gc", "--grace", "soon")
    assert rc == 2 and "not a duration" in err


def test_gc_removes_the_records_of_superseded_noops_and_keeps_what_they_protected(make_workspace, store_url, tmp_path):
    """A daily loop of no-op builds writes one record per command, each listing every
    target; gc removes those that add nothing to what it keeps (another workspace's, a
    build that ran something, the newest word on a target stay), and so keeps every key."""
    store = _store(store_url, tmp_path)

    def build(ws, *patterns: str) -> str:
        time.sleep(1)  # a build of a later second (ids are stamped to the second)
        before = set(store.list("invocations"))
        build_json(ws, *patterns, store=store_url)
        (record,) = {path for path in store.list("invocations") if path.endswith(".json")} - before
        return record

    ws = make_workspace({"pkg/BUILD.marin": BUILD.format(a="one", kept="k1")})
    ran = build(ws, "//pkg:all")
    superseded = [build(ws, "//pkg:all"), build(ws, "//pkg:all")]
    last_on_c = build(ws, "//pkg:all")  # the newest record of //pkg:c
    newest = build(ws, "//pkg:a")
    teammate = make_workspace({"pkg/BUILD.marin": BUILD.format(a="one", kept="k1")})
    teammates_only = build(teammate, "//pkg:a")  # all cached, but the only word of that workspace
    workspace_keys = {layout.key_of(path) for path in store.list("ac")}

    rc, out, err = run_cli(ws, "cache", "gc", "--grace", "1h", store=store_url)
    assert rc == 0 and "records of" not in out, out + err  # none is older than the grace period
    rc, out, err = run_cli(ws, "cache", "gc", "--dry-run", "--grace", "0s", store=store_url)
    assert rc == 0 and "would remove the records of 2 builds" in out, out + err
    assert all(store.exists(record) for record in superseded)

    rc, out, err = run_cli(ws, "cache", "gc", "--grace", "0s", store=store_url)
    assert rc == 0 and "removed 0 keys" in out and "removed the records of 2 builds" in out, out + err
    remaining = {path for path in store.list("invocations") if path.endswith(".json")}
    assert remaining == {ran, last_on_c, newest, teammates_only}
    assert not any(
        path.startswith(tuple(record.removesuffix(".json") for record in superseded))
        for path in store.list("invocations")
    )  # their event streams went with them
    assert {layout.key_of(path) for path in store.list("ac")} == workspace_keys

    rc, out, err = run_cli(ws, "history", "--all", store=store_url)
    assert rc == 0 and out.count("  invocation ") == 4, out + err
    rc, out, err = run_cli(ws, "cache", "gc", "--grace", "0s", store=store_url)
    assert rc == 0 and "removed 0 keys" in out and "records of" not in out, out + err


def test_builds_of_one_second_never_supersede_each_other(tmp_path):
    """Invocation ids are stamped to the second and then ordered by process id, which wraps:
    of two builds in one second, either may be the newer, so neither drops the other, and
    gc keeps the keys of both."""
    store = open_store(str(tmp_path / "store"), tmp_path / "local")
    records = Records(store)

    def record(invocation_id: str, key: str) -> None:
        target = {"label": "//pkg:a", "key": key, "status": "cached"}
        records.write_invocation(
            {"id": invocation_id, "result": "succeeded", "host": "h", "workspace": "/ws", "targets": [target]}
        )

    record("20261201T000000Z-0000009-aaaaaa", "k-first")
    record("20261201T000000Z-0000001-bbbbbb", "k-second")  # ran after it: the process ids wrapped
    found = workspaces_in_use(store)
    assert found.superseded == [] and found.keys == {"k-first", "k-second"}  # either may be in use
    record("20261201T000001Z-0000005-cccccc", "k-second")
    found = workspaces_in_use(store)
    assert sorted(found.superseded) == ["20261201T000000Z-0000001-bbbbbb", "20261201T000000Z-0000009-aaaaaa"]
    assert found.keys == {"k-second"}
