"""External artifacts: data no build made, pinned by its listing and depended on like any
output (issue #19, part 1). Against a local directory and against fake-gcs-server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import build_json, keys, run_cli, statuses

LOCAL = """
external(name = "data", url = "{url}")
genrule(name = "count", srcs = [":data"], outs = ["n.txt"], cmd = "cat $(SRCS) | wc -c > $@")
"""


def _data(directory: Path) -> Path:
    (directory / "shards").mkdir(parents=True)
    (directory / "shards" / "a.jsonl").write_text('{"text": "alpha"}\n')
    (directory / "shards" / "b.jsonl").write_text('{"text": "beta"}\n')
    return directory


def test_a_pinned_directory_is_an_input_whose_changes_stop_the_build(make_workspace, tmp_path):
    data = _data(tmp_path / "data")
    ws = make_workspace({"pkg/BUILD.marin": LOCAL.format(url=data)})
    rc, out, err = run_cli(ws, "build", "//pkg:count")
    assert rc == 2 and "pkg/BUILD.marin:2:" in err and "was never pinned" in err and "marinbuild pin //pkg:data" in err

    rc, out, err = run_cli(ws, "pin", "//pkg:data")
    assert rc == 0 and "2 objects" in out and "pinned" in out, err
    lock = json.loads((ws / "marinbuild.lock").read_text())["pins"]["//pkg:data"]
    assert lock["url"] == str(data) and lock["objects"] == 2 and len(lock["digest"]) == 64
    built = build_json(ws, "//pkg:count")
    assert statuses(built) == {"//pkg:data": "pinned", "//pkg:count": "built"}
    assert built["by_label"]["//pkg:data"]["key"] == lock["digest"]
    assert statuses(build_json(ws, "//pkg:count")) == {"//pkg:data": "pinned", "//pkg:count": "cached"}

    rc, out, err = run_cli(ws, "show", "//pkg:data")
    assert rc == 0 and f"external artifact at {data}" in out and lock["pinned"] in out and "what it holds now" in out
    rc, out, err = run_cli(ws, "query", "kind(external, //...)")
    assert rc == 0 and out.split() == ["//pkg:data"]
    rc, out, err = run_cli(ws, "report", "//pkg:all", "-o", str(tmp_path / "report"))
    [page] = (tmp_path / "report" / "steps").glob("pkg_data-*.html")
    assert rc == 0 and str(data) in page.read_text() and f"pinned {lock['pinned']}" in page.read_text()

    # The objects change: the build stops, naming what changed and how to accept it.
    (data / "shards" / "b.jsonl").write_text('{"text": "beta, longer"}\n')
    rc, out, err = run_cli(ws, "build", "//pkg:count")
    assert rc == 2 and "pkg/BUILD.marin:2:" in err and "shards/b.jsonl: changed" in err
    assert "'marinbuild pin //pkg:data' accepts them" in err
    rc, out, err = run_cli(ws, "show", "//pkg:data")
    assert rc == 0 and "CHANGED since" in out
    rc, out, err = run_cli(ws, "pin", "//pkg:data")
    assert rc == 0 and "re-pinned" in out and "shards/b.jsonl: changed" in out
    assert statuses(build_json(ws, "//pkg:count")) == {"//pkg:data": "pinned", "//pkg:count": "built"}


def test_the_same_bytes_elsewhere_pin_the_same_and_dependents_stay_cached(make_workspace, tmp_path):
    """The digest covers names, sizes and checksums, never where the objects are."""
    data = _data(tmp_path / "data")
    ws = make_workspace({"pkg/BUILD.marin": LOCAL.format(url=data)})
    run_cli(ws, "pin", "//pkg:data")
    first = keys(build_json(ws, "//pkg:count"))
    copy = shutil.copytree(data, tmp_path / "copy")
    (ws / "pkg" / "BUILD.marin").write_text(LOCAL.format(url=copy))
    rc, out, err = run_cli(ws, "build", "//pkg:count")
    assert rc == 2 and "was pinned at another URL" in err
    run_cli(ws, "pin", "//pkg:data")
    again = build_json(ws, "//pkg:count")
    assert keys(again) == first and statuses(again)["//pkg:count"] == "cached"


def test_pin_refuses_what_is_not_external(make_workspace, tmp_path):
    ws = make_workspace({"pkg/BUILD.marin": LOCAL.format(url=_data(tmp_path / "data"))})
    rc, out, err = run_cli(ws, "pin", "//pkg:count")
    assert rc == 2 and "names no external artifact" in err
    bad = make_workspace({"pkg/BUILD.marin": 'external(name = "x", url = "relative/dir")\n'})
    rc, out, err = run_cli(bad, "build", "//pkg:x")
    assert rc == 2 and "pkg/BUILD.marin:1:" in err and "neither a gs:// URL nor an absolute path" in err


URL_RULES = """
from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr
from marinbuild.targets.rule import Rule


def _count(ctx):
    import fsspec

    fs, root = fsspec.core.url_to_fs(ctx.url(ctx.attrs["data"]))
    names = sorted(path[len(root) + 1 :] for path in fs.find(root))
    (ctx.out / "names.txt").write_text("\\n".join(names) + "\\n")


count_objects = Rule(name="count_objects", impl=_count, attrs={"data": Attr(types.LABEL)}, reads_urls=True)
"""

BUCKET = """
external(name = "data", url = "{url}")
count_objects(name = "names", data = ":data")
genrule(name = "copy", srcs = [":data"], outs = ["all.txt"], cmd = "cat $(SRCS) > $@")
"""


def test_a_pinned_bucket_prefix_is_read_in_place(make_workspace, tmp_path, fake_gcs_server, gcs_bucket):
    fs = fake_gcs_server.fs()
    for name, text in (("shards/a.jsonl", "alpha\n"), ("shards/b.jsonl", "beta\n")):
        fs.pipe_file(f"{gcs_bucket}/corpus/{name}", text.encode())
    url = f"gs://{gcs_bucket}/corpus"
    ws = make_workspace(
        {"pkg/BUILD.marin": BUCKET.format(url=url), "myrules.py": URL_RULES}, config='rules = ["myrules"]\n'
    )
    rc, out, err = run_cli(ws, "pin", "//pkg:data")
    assert rc == 0 and "2 objects" in out, err
    built = build_json(ws, "//pkg:names")
    assert statuses(built) == {"//pkg:data": "pinned", "//pkg:names": "built"}
    rc, out, err = run_cli(ws, "where", "//pkg:names")
    assert (Path(out.strip()) / "names.txt").read_text() == "shards/a.jsonl\nshards/b.jsonl\n"
    assert not (ws / ".marinbuild" / "local-cache").exists(), "nothing was copied"
    # A rule that reads local files cannot take a bucket in place: a clear failure.
    failed = build_json(ws, "//pkg:copy", expect_rc=1)
    assert "only a rule that reads URLs" in failed["by_label"]["//pkg:copy"]["reason"]

    fs.pipe_file(f"{gcs_bucket}/corpus/shards/c.jsonl", b"gamma\n")
    rc, out, err = run_cli(ws, "build", "//pkg:names")
    assert rc == 2 and "shards/c.jsonl: added" in err and "pkg/BUILD.marin:2:" in err
