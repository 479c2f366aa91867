"""Sharded steps of many units (issue "Past one machine", item 2): what the builder asks of
the store per unit before, and instead of, running them.

- A unit starts once its own chunk of units is looked up, not once every unit is: a step
  of 100,000 units on a bucket would otherwise wait 100,000 round trips for its first.
- A no-op of a sharded step reads the step's entry, never its units'.
- Its plan (every unit found) on a bucket takes the entries' signatures from one listing,
  not a request per unit.

Requests are counted at the HTTP boundary, through a proxy in front of fake-gcs-server; the
speed itself is measured by bench/shards.py, not asserted here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import build_json, cli_env, run_cli, statuses
from helpers_faults import FaultyProxy

from marinbuild.actions.bookkeeping.results import NullReporter
from marinbuild.actions.execution import shards
from marinbuild.actions.execution.build_options import BuildOptions
from marinbuild.commands.build import build
from marinbuild.session import Session
from marinbuild.store import ActionCache
from marinbuild.store.action_cache import LISTING_PAYS_FROM

RULES = '''
import json

from marinbuild.targets import Attr, Resources, Rule, ShardUnit
from marinbuild.targets import attrs as types


def copy_shard(ctx):
    """One unit: its shard, upper-cased; it says it ran in the workspace's units.log."""
    with open(ctx.workspace / "units.log", "a") as log:
        log.write(ctx.label + "\\n")
    (ctx.out / "docs.jsonl").write_text(ctx.location("shard").read_text().upper())


def _copy(ctx):
    paths = [path for label in ctx.attrs["data"] for path in ctx.files(label)]
    units = [ShardUnit(f"data/{path.name}", {"shard": path}) for path in paths]
    for result in ctx.map_shards("scaleshards:copy_shard", units):
        result.place("docs.jsonl", ctx.out / result.name)
    (ctx.out / "note.txt").write_text(ctx.attrs["note"])


copy_docs = Rule(
    name="copy_docs",
    impl=_copy,
    attrs={"data": Attr(types.LABEL_LIST), "note": Attr(types.STRING, default="")},
    sharded=True,
    resources=Resources(cpu=1),  # a unit at a time: what runs before which look-up is fixed
)
'''
BUILD = 'copy_docs(name = "copied", data = glob(["data/*.jsonl"]), note = "{note}")\n'


def _workspace(make_workspace, names: list[str]) -> Path:
    files = {f"p/data/{name}.jsonl": json.dumps({"text": name}) + "\n" for name in names}
    return make_workspace(
        {"scaleshards.py": RULES, "p/BUILD.marin": BUILD.format(note=""), **files}, 'rules = ["scaleshards"]\n'
    )


def _units_run(ws: Path) -> list[str]:
    """The units that ran since the last call, sorted; then forgotten."""
    log = ws / "units.log"
    ran = sorted(log.read_text().splitlines()) if log.exists() else []
    log.unlink(missing_ok=True)
    return ran


def test_units_start_before_the_later_units_are_looked_up(make_workspace, monkeypatch) -> None:
    ws = _workspace(make_workspace, ["a", "c", "e"])
    assert statuses(build_json(ws, "//p:copied")) == {"//p:copied": "built"}
    assert len(_units_run(ws)) == 3
    for name in ("b", "d"):  # new shards, between those published: [a b] [c d] [e]
        (ws / "p" / "data" / f"{name}.jsonl").write_text(json.dumps({"text": name}) + "\n")

    looked_up: list[tuple[int, int]] = []  # (keys looked up together, units run before)
    lookup_many = ActionCache.lookup_many

    def recorded(cache: ActionCache, keys: list[str]) -> list:
        log = ws / "units.log"
        looked_up.append((len(keys), len(log.read_text().splitlines()) if log.exists() else 0))
        return lookup_many(cache, keys)

    monkeypatch.setattr(shards, "_LOOKUP_CHUNK", 2)
    monkeypatch.setattr(ActionCache, "lookup_many", recorded)
    monkeypatch.syspath_prepend(str(ws))
    result = build(Session.open(ws), ["//p:copied"], BuildOptions(jobs=1), NullReporter())
    assert result.counts == {"built": 1, "cached": 0, "failed": 0, "skipped": 0}, result.counts
    assert _units_run(ws) == ["//p:copied [data/b.jsonl]", "//p:copied [data/d.jsonl]"]
    # The units' look-ups, two at a time, each after the units before it ran.
    assert looked_up[-3:] == [(2, 0), (2, 1), (1, 2)], looked_up
    rc, out, err = run_cli(ws, "where", "//p:copied")
    assert rc == 0, err
    output = Path(out.strip())
    texts = {path.name: path.read_text() for path in (output / "data").iterdir()}
    assert texts == {f"{name}.jsonl": json.dumps({"text": name}).upper() + "\n" for name in "abcde"}


def _requests(ws: Path, store: str, upstream: str) -> list[str]:
    """Every request of `build //p:copied` on `store`, through a proxy: ("METHOD path", ...)."""
    proxy = FaultyProxy(upstream)
    try:
        rc, out, err = run_cli(
            ws, "build", "--json", "//p:copied", store=store, env={**cli_env(), "STORAGE_EMULATOR_HOST": proxy.url}
        )
        assert rc == 0, err
        return list(proxy.requests)
    finally:
        proxy.close()


def _entry_metadata(request: str) -> bool:
    """A look-up of one action-cache entry's signature (its object's metadata, not a listing
    nor its bytes)."""
    return "%2Fac%2F" in request and "alt=media" not in request and "prefix=" not in request


@pytest.mark.parametrize("units", [LISTING_PAYS_FROM + 8])
def test_a_sharded_step_asks_a_bucket_nothing_per_unit_on_a_noop_and_lists_its_units_entries(
    make_workspace, fake_gcs_server, gcs_bucket, units
) -> None:
    store = f"gs://{gcs_bucket}/team"
    ws = _workspace(make_workspace, [f"s{index:03d}" for index in range(units)])
    assert statuses(build_json(ws, "//p:copied", store=store)) == {"//p:copied": "built"}
    assert len(_units_run(ws)) == units
    rc, out, err = run_cli(ws, "show", "--json", "//p:copied", store=store)
    assert rc == 0, err
    unit_keys = set(json.loads(out)["shards"])
    assert len(unit_keys) == units

    noop = _requests(ws, store, fake_gcs_server.url)
    assert _units_run(ws) == []
    assert not [request for request in noop if any(key in request for key in unit_keys)], noop
    assert len(noop) <= 10, noop

    # Only the driver's attribute changed: the step runs again, every unit is found, each
    # entry's signature taken from one listing.
    (ws / "p" / "BUILD.marin").write_text(BUILD.format(note="again"))
    planned = _requests(ws, store, fake_gcs_server.url)
    assert _units_run(ws) == []
    asked = [request for request in planned if _entry_metadata(request) and any(key in request for key in unit_keys)]
    assert asked == [], asked
