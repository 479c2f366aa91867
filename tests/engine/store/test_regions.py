"""A store in several regions (store/mirrors.py), on fake-gcs-server: an entry missing from
the local bucket and present in a mirror is copied in by GCS's rewrite, once, within the
build's egress budget, and never when it does not verify.

fake-gcs-server gives every bucket the one location it was started with (its -location
flag; the JSON API's `location` on create is ignored), so the requests go through a proxy
on 127.0.0.1 that answers a bucket's metadata with the location a real GCS would report
for a bucket created in that region; everything else is fake-gcs-server's own answer. The
proxy also lists every request, which shows what reached which bucket.
"""

from __future__ import annotations

import html
import json
import re
from urllib.parse import unquote

import pytest
from conftest import build_json, run_cli, statuses
from helpers_faults import FaultyProxy, bucket_problems

from marinbuild.actions.analysis.keys import checkpoint_key
from marinbuild.store.mirrors import format_bytes

BUILD = {
    "pkg/BUILD.marin": """\
        genrule(name = "data", outs = ["data.bin"], cmd = "for i in $$(seq 1000); do echo line-$$i; done > $@")
        genrule(name = "count", srcs = [":data"], outs = ["count.txt"], cmd = "wc -l < $< > $@")
        """
}
DATA_BYTES = sum(len(f"line-{i}\n") for i in range(1, 1001))
COUNT_BYTES = len("1000\n")


class Regions:
    """Two buckets of one store, `us` in us-central2 and `eu` in europe-west4, behind a
    proxy that reports their locations and records every request."""

    def __init__(self, fake_gcs_server, monkeypatch):
        self.us, self.eu = fake_gcs_server.new_bucket(), fake_gcs_server.new_bucket()
        self.fs = fake_gcs_server.fs()
        locations = {self.us: "US-CENTRAL2", self.eu: "EUROPE-WEST4"}

        def located(method: str, path: str, body: bytes) -> bytes:
            bucket = unquote(path.split("?", 1)[0]).removeprefix("/storage/v1/b/")
            if method == "GET" and bucket in locations:
                return json.dumps({**json.loads(body), "location": locations[bucket]}).encode()
            return body

        self.proxy = FaultyProxy(fake_gcs_server.url, edit=located)
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", self.proxy.url)

    def config(self, extra: str = "") -> str:
        return f'store = "gs://{self.us}/mb"\nmirrors = ["gs://{self.eu}/mb"]\n{extra}'

    def requests_to(self, bucket: str) -> list[str]:
        return [request for request in self.proxy.requests if f"/b/{bucket}/" in unquote(request) + "/"]

    def objects(self, bucket: str, area: str) -> list[str]:
        self.fs.invalidate_cache()
        return self.fs.find(f"{bucket}/mb/{area}")


@pytest.fixture
def regions(fake_gcs_server, monkeypatch):
    found = Regions(fake_gcs_server, monkeypatch)
    yield found
    found.proxy.close()


def _downloads(requests: list[str], area: str) -> list[str]:
    """Requests that read an object's bytes under `area` (out/, ac/) of the store."""
    return [request for request in requests if "alt=media" in request and f"/mb/{area}/" in unquote(request)]


def test_a_hit_in_a_mirror_is_copied_by_gcs_once_then_hits_locally(make_workspace, regions, tmp_path):
    eu = make_workspace(BUILD, config=f'store = "gs://{regions.eu}/mb"\n')
    assert statuses(build_json(eu, "//pkg:data")) == {"//pkg:data": "built"}
    us = make_workspace(BUILD, config=regions.config())
    regions.proxy.requests.clear()

    first = build_json(us, "//pkg:all")
    data, count = first["by_label"]["//pkg:data"], first["by_label"]["//pkg:count"]
    assert (data["status"], count["status"]) == ("cached", "built")
    assert (
        data["reason"] == f"copied from gs://{regions.eu}/mb (europe-west4 → us-central2), {format_bytes(DATA_BYTES)}"
    )
    assert data["output"].startswith(f"gs://{regions.us}/mb/out/")
    # GCS moved the bytes: the builder read the mirror's entry, never its outputs, and the
    # step that followed read the copy in the local bucket.
    assert [r for r in regions.requests_to(regions.eu) if "rewriteTo" in r]
    assert not _downloads(regions.requests_to(regions.eu), "out")
    assert _downloads(regions.requests_to(regions.us), "out")
    assert "copied from" in first["stderr"]
    # The local bucket holds the same entry, byte for byte, and its files verify.
    key = data["key"]
    entry = f"mb/ac/{key[:2]}/{key}.json"
    assert regions.fs.cat_file(f"{regions.us}/{entry}") == regions.fs.cat_file(f"{regions.eu}/{entry}")
    assert bucket_problems(regions.fs, f"{regions.us}/mb") == []

    regions.proxy.requests.clear()
    again = build_json(us, "//pkg:all")
    assert set(statuses(again).values()) == {"cached"}
    assert not any("reason" in item for item in again["targets"])
    assert regions.requests_to(regions.eu) == [], "a no-op build asks no mirror anything"

    rc, out, err = run_cli(us, "cache", "stats")
    assert rc == 0, err
    assert f"copied from europe-west4 to us-central2: 1 entries, {DATA_BYTES:,} bytes" in out
    rc, out, err = run_cli(us, "show", "//pkg:data")
    assert rc == 0, err
    assert f"copied       from gs://{regions.eu}/mb (europe-west4 → us-central2), {DATA_BYTES:,} bytes" in out
    rc, out, err = run_cli(us, "report", "//pkg:all", "-o", str(tmp_path / "report"))
    assert rc == 0, err
    pages = "".join(page.read_text() for page in (tmp_path / "report").rglob("*.html"))
    assert f"<th>copied</th><td>from gs://{regions.eu}/mb (europe-west4 → us-central2)" in pages


def test_past_the_egress_budget_a_build_copies_nothing_and_stops_unless_allowed(make_workspace, regions):
    eu = make_workspace(BUILD, config=f'store = "gs://{regions.eu}/mb"\n')
    assert set(statuses(build_json(eu, "//pkg:all")).values()) == {"built"}
    us = make_workspace(BUILD, config=regions.config("egress_budget_gb = 0.000005\n"))

    rc, out, err = run_cli(us, "build", "--dry-run", "//pkg:all")
    assert rc == 0, err
    assert (
        f"would-copy //pkg:data  (in gs://{regions.eu}/mb (europe-west4 → us-central2), {format_bytes(DATA_BYTES)}"
        in out
    )
    # The dry run ends saying the build would stop, as the build does, and exits 0.
    total = format_bytes(DATA_BYTES + COUNT_BYTES)
    assert out.splitlines()[-1] == (
        f"copying 2 entries from mirrors would move {total} across regions, over this build's egress budget "
        "of 5.0 kB: a build stops before copying (exit 2); pass --allow-egress to copy them anyway, "
        "or raise egress_budget_gb (marinbuild.toml:3)"
    )
    assert build_json(us, "--dry-run", "//pkg:all")["notes"] == [out.splitlines()[-1]]
    rc, out, err = run_cli(us, "build", "--dry-run", "--allow-egress", "//pkg:all")
    assert rc == 0 and out.splitlines()[-1].endswith(
        "(--allow-egress: this build's egress budget of 5.0 kB does not apply)"
    )
    roomy = make_workspace(BUILD, config=regions.config())
    rc, out, err = run_cli(roomy, "build", "--dry-run", "//pkg:all")
    assert rc == 0 and out.splitlines()[-1] == (
        f"copying 2 entries from mirrors would move {total} across regions, "
        "within this build's egress budget of 10.0 GB"
    )

    rc, out, err = run_cli(us, "build", "//pkg:all")
    assert rc == 2, err
    assert re.search(rf"pkg/BUILD.marin:1(:\d+)?: copying 2 entries from other regions would move {total}", err), err
    assert "over this build's egress budget of 5.0 kB; none of them was copied" in err
    assert "//pkg:data (" in err and "//pkg:count (" in err
    assert "hint: pass --allow-egress to copy them anyway, or raise egress_budget_gb (marinbuild.toml:3)" in err
    assert regions.objects(regions.us, "ac") == [] and regions.objects(regions.us, "out") == []

    allowed = build_json(us, "//pkg:all", "--allow-egress")
    assert set(statuses(allowed).values()) == {"cached"}
    assert all(item["reason"].startswith("copied from") for item in allowed["targets"])
    assert len(regions.objects(regions.us, "ac")) == 2
    assert bucket_problems(regions.fs, f"{regions.us}/mb") == []


def test_a_copy_found_downstream_of_a_step_that_ran_is_checked_against_the_budget(make_workspace, regions):
    eu = make_workspace(BUILD, config=f'store = "gs://{regions.eu}/mb"\n')
    built = build_json(eu, "//pkg:all")
    data_key = built["by_label"]["//pkg:data"]["key"]
    regions.fs.rm(f"{regions.eu}/mb/ac/{data_key[:2]}/{data_key}.json")  # the mirror keeps :count only
    us = make_workspace(BUILD, config=regions.config("egress_budget_gb = 0.000000001\n"))

    rc, _out, err = run_cli(us, "build", "//pkg:all")
    assert rc == 2, err
    assert "copying 1 entries from other regions would move 5 B" in err and "//pkg:count (" in err
    assert "built //pkg:data" in err and "    //pkg:data (" not in err  # it ran here; only :count would be copied
    assert regions.objects(regions.us, "ac") == [f"{regions.us}/mb/ac/{data_key[:2]}/{data_key}.json"]
    assert regions.objects(regions.us, "copies") == []


@pytest.mark.parametrize("damage", ["output", "entry"])
def test_a_corrupt_entry_in_a_mirror_is_never_served(make_workspace, regions, damage):
    eu = make_workspace(BUILD, config=f'store = "gs://{regions.eu}/mb"\n')
    key = build_json(eu, "//pkg:data")["by_label"]["//pkg:data"]["key"]
    if damage == "output":  # the same size, other bytes: its CRC32C is not the one recorded
        path = f"{regions.eu}/mb/out/{key[:2]}/{key}/data.bin"
        data = regions.fs.cat_file(path)
        regions.fs.pipe_file(path, data.replace(b"line-1\n", b"line-X\n", 1))
    else:  # an entry claiming another recipe
        path = f"{regions.eu}/mb/ac/{key[:2]}/{key}.json"
        entry = json.loads(regions.fs.cat_file(path))
        entry["recipe"]["attrs"]["cmd"] = "echo forged > $@"
        regions.fs.pipe_file(path, json.dumps(entry).encode())
    us = make_workspace(BUILD, config=regions.config())

    result = build_json(us, "//pkg:all")
    assert statuses(result) == {"//pkg:data": "built", "//pkg:count": "built"}
    assert "not copied: it is built here" in result["stderr"]
    assert not [r for r in regions.requests_to(regions.eu) if "rewriteTo" in r]
    assert bucket_problems(regions.fs, f"{regions.us}/mb") == []
    assert regions.objects(regions.us, "copies") == []


def test_the_builders_region_picks_the_local_bucket(make_workspace, regions, monkeypatch):
    ws = make_workspace(BUILD, config=regions.config('region = "europe-west4"\n'))
    assert set(statuses(build_json(ws, "//pkg:data")).values()) == {"built"}
    assert regions.objects(regions.eu, "ac") and not regions.objects(regions.us, "ac")

    monkeypatch.setenv("MARINBUILD_REGION", "asia-east1")
    rc, _out, err = run_cli(ws, "build", "//pkg:data")
    assert rc == 2
    assert "none of the store's buckets is in asia-east1, this builder's region" in err
    assert f"gs://{regions.us}/mb (us-central2), gs://{regions.eu}/mb (europe-west4)" in err


def test_a_mirror_of_another_store_is_refused(make_workspace, regions):
    regions.fs.pipe_file(f"{regions.eu}/mb/store.json", json.dumps({"format": 1, "salt": "other"}).encode())
    ws = make_workspace(BUILD, config=regions.config())
    rc, _out, err = run_cli(ws, "build", "//pkg:data")
    assert rc == 2
    assert f"mirror gs://{regions.eu}/mb has the salt 'other'" in err and "their keys never match" in err


def test_mirrors_are_gs_buckets_and_the_budget_a_number(make_workspace):
    for setting, message in [
        ('mirrors = ["/data/mirror"]', "'mirrors' lists gs:// buckets"),
        ("egress_budget_gb = -1", "'egress_budget_gb' must be a number of GB"),
    ]:
        ws = make_workspace(BUILD, config=setting + "\n")
        rc, _out, err = run_cli(ws, "build", "//pkg:data")
        assert rc == 2 and message in err, err


def _writes(requests: list[str]) -> list[str]:
    """Requests that would change a bucket: anything but GET (reads, listings, metadata)."""
    return [request for request in requests if not request.startswith("GET ")]


def test_read_commands_see_a_target_built_only_in_the_mirror_and_copy_nothing(make_workspace, regions, tmp_path):
    eu = make_workspace(BUILD, config=f'store = "gs://{regions.eu}/mb"\n')
    built = build_json(eu, "//pkg:all")
    data_key = built["by_label"]["//pkg:data"]["key"]
    us = make_workspace(BUILD, config=regions.config())
    regions.proxy.requests.clear()
    elsewhere = (
        f"built in gs://{regions.eu}/mb (europe-west4), not yet in this builder's bucket (us-central2): "
        f"a build here would copy {format_bytes(DATA_BYTES)} across regions (cross-region egress)"
    )

    rc, out, err = run_cli(us, "show", "//pkg:data")
    assert rc == 0, err
    assert f"  in a mirror  {elsewhere}" in out and "not built" not in out + err
    rc, out, err = run_cli(us, "show", "--json", "//pkg:data")
    assert rc == 0, err
    shown = json.loads(out)
    assert shown["key"] == data_key and "copied" not in shown
    assert shown["provenance"]["attempt"] == built["by_label"]["//pkg:data"]["attempt"]  # the original builder's
    assert {name: shown["mirrored"][name] for name in ("in", "region", "to_region", "bytes", "crosses_regions")} == {
        "in": f"gs://{regions.eu}/mb",
        "region": "europe-west4",
        "to_region": "us-central2",
        "bytes": DATA_BYTES,
        "crosses_regions": True,
    }

    rc, out, err = run_cli(us, "where", "//pkg:data")
    assert rc == 0, err
    assert out.strip() == f"gs://{regions.eu}/mb/out/{data_key[:2]}/{data_key}"
    assert f"marinbuild: note: //pkg:data is {elsewhere}" in err

    rc, out, err = run_cli(us, "explain", "//pkg:data")
    assert rc == 0, err
    assert out.startswith(f"//pkg:data: would be copied, not run: {elsewhere} (key {data_key[:12]}, built by ")
    rc, out, err = run_cli(us, "explain", "--json", "//pkg:count")
    assert rc == 0, err
    assert json.loads(out)["status"] == "would-copy"  # its key is made of the mirror's :data

    for expression, expected in [
        ("cached(//pkg:all)", "//pkg:count\n//pkg:data\n"),
        ("mirrored(//pkg:all)", "//pkg:count\n//pkg:data\n"),
        ("stale(//pkg:all) + pending(//pkg:all)", ""),
    ]:
        rc, out, err = run_cli(us, "query", expression)
        assert (rc, out) == (0, expected), (expression, err)

    rc, out, err = run_cli(us, "report", "//pkg:all", "-o", str(tmp_path / "report"))
    assert rc == 0, err
    pages = "".join(page.read_text() for page in (tmp_path / "report").rglob("*.html"))
    assert f"<th>in a mirror</th><td>{html.escape(elsewhere)}</td>" in pages

    # Read commands read the mirror's entries and listings, never an output byte, and
    # write nothing to either bucket.
    assert not _downloads(regions.requests_to(regions.eu), "out")
    assert _writes(regions.requests_to(regions.eu)) == [] and _writes(regions.requests_to(regions.us)) == []
    assert regions.objects(regions.us, "") == []


def test_read_commands_never_report_a_forged_mirror_entry_as_built(make_workspace, regions):
    eu = make_workspace(BUILD, config=f'store = "gs://{regions.eu}/mb"\n')
    key = build_json(eu, "//pkg:data")["by_label"]["//pkg:data"]["key"]
    path = f"{regions.eu}/mb/ac/{key[:2]}/{key}.json"
    entry = json.loads(regions.fs.cat_file(path))
    entry["recipe"]["attrs"]["cmd"] = "echo forged > $@"
    regions.fs.pipe_file(path, json.dumps(entry).encode())
    us = make_workspace(BUILD, config=regions.config())

    rc, out, _err = run_cli(us, "query", "cached(//pkg:all) + mirrored(//pkg:all)")
    assert (rc, out) == (0, "")
    rc, _out, err = run_cli(us, "show", "//pkg:data")
    assert rc == 2 and "has no output" in err
    rc, _out, err = run_cli(us, "show", key)
    assert rc == 2 and "no usable entry" in err
    rc, out, _err = run_cli(us, "explain", "//pkg:data")
    assert rc == 0 and "//pkg:data: would run" in out


def test_read_commands_look_many_keys_up_in_a_mirror_with_one_listing(make_workspace, regions):
    many = {
        "many/BUILD.marin": "".join(f'genrule(name = "t{i}", outs = ["o"], cmd = "echo {i} > $@")\n' for i in range(40))
    }
    us = make_workspace(many, config=regions.config())
    regions.proxy.requests.clear()
    rc, out, err = run_cli(us, "query", "cached(//many:all)")
    assert (rc, out) == (0, ""), err
    to_eu = regions.requests_to(regions.eu)
    # The store's salt, then a listing of its entries (gcsfs asks twice of an empty prefix):
    # not a request per key, as many keys are not in the mirror.
    assert [request for request in to_eu if "/mb/ac/" in unquote(request).split("?")[0]] == []
    assert any("prefix=mb/ac" in unquote(request) for request in to_eu), "the mirror was asked"
    assert len(to_eu) <= 3, to_eu


KEEPER = 'counter(name = "count", steps = 4, keep = [2])\nreader(name = "read2", src = ":count", step = 2)\n'


def _keeper_workspaces(make_workspace, regions) -> tuple:
    """A keeper and the reader of its state at step 2 (tests/engine/actions/test_kept_checkpoints.py's
    toy rules), built in the eu bucket; a workspace of the us builder, and the keys."""
    from helpers_kept_checkpoints import RULES

    files = {"toyrules.py": RULES, "p/BUILD.marin": KEEPER}
    eu = make_workspace(files, config=f'rules = ["toyrules"]\nstore = "gs://{regions.eu}/mb"\n')
    built = build_json(eu, "//p:all")
    count = built["by_label"]["//p:count"]["key"]
    us = make_workspace(files, config='rules = ["toyrules"]\n' + regions.config())
    return us, count, checkpoint_key(count, 2)


def test_a_keeper_copied_from_a_mirror_brings_its_kept_states_counted_in_the_egress(make_workspace, regions):
    us, count, kept = _keeper_workspaces(make_workspace, regions)
    # final.txt ("4\n") and the state's value.txt ("2\n"): one copy, two entries, 4 B.
    rc, out, err = run_cli(us, "build", "--dry-run", "//p:all")
    assert rc == 0, err
    assert f"would-copy //p:count  (in gs://{regions.eu}/mb (europe-west4 → us-central2), 4 B" in out
    assert "would-copy //p:read2" in out  # its key is made of the state the copy brings
    assert out.splitlines()[-1] == (
        "copying 3 entries from mirrors would move 6 B across regions, within this build's egress budget of 10.0 GB"
    )

    copied = build_json(us, "//p:all")
    assert set(statuses(copied).values()) == {"cached"}
    assert copied["by_label"]["//p:count"]["reason"].endswith(", 4 B")
    entries = {path.rsplit("/", 1)[1].removesuffix(".json") for path in regions.objects(regions.us, "ac")}
    assert entries >= {count, kept}
    assert [path for path in regions.objects(regions.us, "out") if path.endswith("value.txt")] == [
        f"{regions.us}/mb/out/{kept[:2]}/{kept}/value.txt"
    ]
    assert bucket_problems(regions.fs, f"{regions.us}/mb") == []
    rc, out, err = run_cli(us, "cache", "stats")
    assert rc == 0 and "copied from europe-west4 to us-central2: 3 entries, 6 bytes" in out, out + err

    regions.proxy.requests.clear()
    assert set(statuses(build_json(us, "//p:all")).values()) == {"cached"}
    assert regions.requests_to(regions.eu) == []


def test_a_keeper_whose_mirror_lacks_its_kept_state_is_built_here(make_workspace, regions):
    us, count, kept = _keeper_workspaces(make_workspace, regions)
    regions.fs.rm(f"{regions.eu}/mb/ac/{kept[:2]}/{kept}.json")

    built = build_json(us, "//p:all")
    assert statuses(built) == {"//p:count": "built", "//p:read2": "cached"}
    assert f"names its checkpoint at step 2 ({kept[:12]}), which the mirror lacks; not copied" in built["stderr"]
    assert built["by_label"]["//p:read2"]["reason"].startswith("copied from")  # the same state: the same key
    assert bucket_problems(regions.fs, f"{regions.us}/mb") == []
