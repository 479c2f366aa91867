"""What makes a no-op build on a shared bucket fast: a few requests, not one per target.

Issue #16: a no-op build of 1,000 cached targets sent 2,003 requests (an entry read and a
listing per target), and on real GCS each costs a round trip. Now one listing (a page
per thousand entries) answers every look-up, entries read before are remembered by
generation, and outputs are verified when read rather than listed per look-up. Counted
here at the HTTP boundary, against fake-gcs-server. (The speed itself is measured by
bench/store.py, not asserted here.)

Issue #28: a machine that never built the targets (a new checkout, a new HOME) remembers
no entry, and each level of the graph waited for the entries of the level before it, whose
tree digests its keys are made of: a round trip per level. Now the listing shows each
entry's tree digest beside it, the build foresees every key from it, and reads the
entries it needs all at once; the hint is never trusted (an entry read says what the
outputs are).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from conftest import build_json, cli_env, parse_json_output, run_cli, statuses
from helpers_faults import FaultyProxy
from helpers_kept_checkpoints import RULES as KEPT_RULES

from marinbuild.store import layout
from marinbuild.store.action_cache import LISTING_PAYS_FROM, TREE_HINT


def _genrules(count: int) -> dict[str, str]:
    lines = [f'genrule(name = "t{i}", outs = ["t{i}.txt"], cmd = "echo {i} > $@")' for i in range(count)]
    return {"pkg/BUILD.marin": "\n".join(lines) + "\n"}


def _chain(count: int) -> dict[str, str]:
    """`count` genrules, each reading the one before it: a graph `count` levels deep."""
    lines = ['genrule(name = "t0", outs = ["t0.txt"], cmd = "echo 0 > $@")']
    lines += [
        f'genrule(name = "t{i}", srcs = [":t{i - 1}"], outs = ["t{i}.txt"], cmd = "cat $(SRCS) > $@ && echo {i} >> $@")'
        for i in range(1, count)
    ]
    return {"pkg/BUILD.marin": "\n".join(lines) + "\n"}


# How long the proxy holds an entry read waiting for the others. Reads that go together
# all come within a second on an idle machine; a busy one (another job on both cores) can
# take tens. Reads that go a level at a time never come together, however long it waits.
# Below the store's request deadline (60 s), so that no read held is retried.
TOGETHER_S = 45


def _new_machine(tmp_path: Path, proxy_url: str) -> dict[str, str]:
    """The environment of a machine that never built anything: a HOME of its own, empty."""
    home = tmp_path / f"home-{len(list(tmp_path.glob('home-*')))}"
    home.mkdir()
    return {**cli_env(), "HOME": str(home), "STORAGE_EMULATOR_HOST": proxy_url}


def _entry_read(method: str, path: str) -> bool:
    """Whether a request reads an action-cache entry's bytes (gcsfs's `cat_file`)."""
    return method == "GET" and "alt=media" in path and "%2Fac%2F" in path


def _noop_requests(ws, store: str, upstream: str) -> int:
    proxy = FaultyProxy(upstream)
    try:
        rc, out, err = run_cli(
            ws, "build", "--json", "//pkg:all", store=store, env={**cli_env(), "STORAGE_EMULATOR_HOST": proxy.url}
        )
        assert rc == 0, err
        assert '"cached": ' in out and '"built": 0' in out
        return len(proxy.requests)
    finally:
        proxy.close()


def test_a_noop_build_sends_a_few_requests_whatever_the_number_of_targets(make_workspace, fake_gcs_server, gcs_bucket):
    counts = {}
    for count in (40, 240):
        ws = make_workspace(_genrules(count))
        store = f"gs://{gcs_bucket}/n{count}"
        assert set(statuses(build_json(ws, "//pkg:all", store=store)).values()) == {"built"}
        _noop_requests(ws, store, fake_gcs_server.url)  # the first no-op on a machine reads each entry once
        counts[count] = _noop_requests(ws, store, fake_gcs_server.url)
    assert counts[240] <= 0.05 * 240 + 10, counts
    assert counts[240] - counts[40] <= 0.05 * 200, counts


def _noop_on_a_new_machine(
    files: dict[str, str], config: str, store: str, make_workspace, upstream: str, tmp_path: Path, entries: int
) -> tuple[dict, list[str], list[str]]:
    """A no-op of `files` on `store` from a new checkout and a new HOME, through a proxy that
    holds the answer to each entry read until `entries` of them have come: (the build's
    report, the entry reads that came after the others had given up waiting, every request)."""
    together = threading.Barrier(entries)
    apart: list[str] = []

    def hold_until_all_came(method: str, path: str, body: bytes) -> bytes:
        if _entry_read(method, path):
            try:
                together.wait(timeout=TOGETHER_S)
            except threading.BrokenBarrierError:
                apart.append(path)
        return body

    proxy = FaultyProxy(upstream, edit=hold_until_all_came)
    try:
        ws = make_workspace(files, config)
        rc, out, err = run_cli(ws, "build", "--json", "//...", store=store, env=_new_machine(tmp_path, proxy.url))
    finally:
        proxy.close()
    assert rc == 0, err
    return parse_json_output(out), apart, proxy.requests


def test_a_new_machine_reads_the_entries_of_every_level_at_once(make_workspace, fake_gcs_server, gcs_bucket, tmp_path):
    """A no-op from a new checkout and a new HOME, on a chain as deep as it is long: every
    entry read is in flight at once (the proxy holds each answer until all of them have
    come), not one level after another, and each entry is read once."""
    count = LISTING_PAYS_FROM + 8
    files = _chain(count)
    store = f"gs://{gcs_bucket}/chain"
    built = build_json(make_workspace(files), "//...", store=store)
    assert set(statuses(built).values()) == {"built"}
    noop, apart, requests = _noop_on_a_new_machine(
        files, "", store, make_workspace, fake_gcs_server.url, tmp_path, count
    )
    assert set(statuses(noop).values()) == {"cached"}
    assert {item["label"]: item["key"] for item in noop["targets"]} == {
        item["label"]: item["key"] for item in built["targets"]
    }
    assert not apart, f"{len(apart)} of {count} entries were read after the others"
    reads = [request for request in requests if _entry_read(*request.split(" ", 1))]
    assert len(reads) == count, reads
    assert len(requests) <= count + 8, requests


def test_a_new_machine_reads_kept_states_and_their_readers_with_the_rest(
    make_workspace, fake_gcs_server, gcs_bucket, tmp_path
):
    """The entries of the states a step kept are part of its look-up, and what reads one
    has a key made of that state's digest: they are foreseen too, and read with the rest."""
    lines = [
        "counter(name = 'count', steps = 4, keep = [1, 2])",
        "reader(name = 'read2', src = ':count', step = 2)",
        "reader(name = 'read_all', src = ':count')",
        *(f'genrule(name = "f{i}", outs = ["f{i}.txt"], cmd = "echo {i} > $@")' for i in range(LISTING_PAYS_FROM)),
    ]
    files = {"toyrules.py": KEPT_RULES, "p/BUILD.marin": "\n".join(lines) + "\n"}
    config, store = 'rules = ["toyrules"]\n', f"gs://{gcs_bucket}/kept"
    built = build_json(make_workspace(files, config), "//...", store=store)
    assert set(statuses(built).values()) == {"built"}
    entries = LISTING_PAYS_FROM + 3 + 2  # the targets, and the two states kept
    noop, apart, _ = _noop_on_a_new_machine(
        files, config, store, make_workspace, fake_gcs_server.url, tmp_path, entries
    )
    assert set(statuses(noop).values()) == {"cached"}
    assert noop["by_label"]["//p:read2"]["key"] == built["by_label"]["//p:read2"]["key"]
    assert not apart, f"{len(apart)} of {entries} entries were read after the others"


def test_a_wrong_tree_digest_beside_an_entry_never_makes_a_wrong_hit(
    make_workspace, fake_gcs_server, gcs_bucket, tmp_path
):
    """The tree digest a listing shows beside an entry is a hint: set to another output's
    (that of another version of the same target, whose dependent is built too), a new
    machine foresees the wrong key for the dependent, and still finds the right one, from
    the entry itself."""
    fillers = [f'genrule(name = "f{i}", outs = ["f{i}.txt"], cmd = "echo {i} > $@")' for i in range(LISTING_PAYS_FROM)]

    def version(text: str) -> dict[str, str]:
        lines = [
            f'genrule(name = "a", outs = ["a.txt"], cmd = "echo {text} > $@")',
            'genrule(name = "b", srcs = [":a"], outs = ["b.txt"], cmd = "cat $(SRCS) > $@ && echo b >> $@")',
            *fillers,
        ]
        return {"pkg/BUILD.marin": "\n".join(lines) + "\n"}

    store = f"gs://{gcs_bucket}/hint"
    first = build_json(make_workspace(version("one")), "//pkg:all", store=store)["by_label"]
    second = build_json(make_workspace(version("two")), "//pkg:all", store=store)["by_label"]
    assert first["//pkg:b"]["key"] != second["//pkg:b"]["key"]
    fs = fake_gcs_server.fs()

    def entry(key: str) -> str:
        return f"{gcs_bucket}/hint/{layout.entry(key)}"

    other_tree = json.loads(fs.cat(entry(second["//pkg:a"]["key"])))["tree_digest"]
    fs.setxattrs(entry(first["//pkg:a"]["key"]), **{TREE_HINT: other_tree})  # the metadata alone: same generation
    assert fs.info(entry(first["//pkg:a"]["key"]))["metadata"] == {TREE_HINT: other_tree}

    proxy = FaultyProxy(fake_gcs_server.url)
    try:
        ws = make_workspace(version("one"))
        rc, out, err = run_cli(ws, "build", "--json", "//pkg:all", store=store, env=_new_machine(tmp_path, proxy.url))
    finally:
        proxy.close()
    assert rc == 0, err
    noop = parse_json_output(out)["by_label"]
    assert {label: item["status"] for label, item in noop.items()} == dict.fromkeys(noop, "cached")
    assert noop["//pkg:b"]["key"] == first["//pkg:b"]["key"]
    foreseen = entry(second["//pkg:b"]["key"]).split("/", 1)[1].replace("/", "%2F")
    assert any(foreseen in request for request in proxy.requests), "the wrong hint was not followed"
    assert fs.cat(f"{noop['//pkg:b']['output']}/b.txt") == b"one\nb\n"
