"""What reruns, and what does not: keys, early cutoff, sources, and where the store lives."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from conftest import (
    CLI_TIMEOUT_S,
    attempt_records,
    build_json,
    cli_command,
    cli_env,
    keys,
    output_text,
    parse_json_output,
    statuses,
    store_files,
)

A, B, C, D = "//pkg:a", "//pkg:b", "//pkg:c", "//pkg:d"


def chain_build(a_cmd: str = "cat $< > $@; echo a >> $@", b_cmd: str = "cat $< > $@; echo b >> $@") -> str:
    """A chain a -> b -> c reading pkg/in.txt, and d, independent of all of them."""
    return textwrap.dedent(f"""\
        # A chain of three and one independent target.
        genrule(
            name = "a",
            srcs = ["in.txt"],
            outs = ["a.txt"],
            cmd = {a_cmd!r},
        )

        genrule(
            name = "b",
            srcs = [":a"],
            outs = ["b.txt"],
            cmd = {b_cmd!r},
        )

        genrule(
            name = "c",
            srcs = [":b"],
            outs = ["c.txt"],
            cmd = "cat $< > $@; echo c >> $@",
        )

        genrule(
            name = "d",
            outs = ["d.txt"],
            cmd = "echo d > $@",
        )
        """)


@pytest.fixture
def chain(make_workspace):
    ws = make_workspace({"pkg/BUILD.marin": chain_build(), "pkg/in.txt": "input\n"})
    first = build_json(ws, "//pkg:all")
    assert statuses(first) == {A: "built", B: "built", C: "built", D: "built"}
    assert output_text(first, C, "c.txt") == "input\na\nb\nc\n"
    return ws, first


def attempt_count(store: Path) -> int:
    return len(list((store / "attempts").glob("*/*/*.json")))


def set_build(ws: Path, text: str) -> None:
    (ws / "pkg" / "BUILD.marin").write_text(textwrap.dedent(text))


# -- 1. a second build runs nothing ---------------------------------------------------------


def test_second_build_is_all_cached_and_runs_nothing(chain):
    ws, first = chain
    attempts_before = attempt_count(ws / "cache")
    second = build_json(ws, "//pkg:all")
    assert statuses(second) == {A: "cached", B: "cached", C: "cached", D: "cached"}
    assert second["counts"]["built"] == 0 and second["counts"]["cached"] == 4
    assert keys(second) == keys(first)
    assert attempt_count(ws / "cache") == attempts_before, "a cached build must start no attempt"
    # The outputs reported are the published ones, unchanged.
    assert output_text(second, C, "c.txt") == "input\na\nb\nc\n"


def test_second_build_of_a_single_target_is_cached(chain):
    ws, _ = chain
    again = build_json(ws, C)
    assert statuses(again) == {A: "cached", B: "cached", C: "cached"}


# -- 2. identity changes rerun the target and its dependents, nothing else -------------------


@pytest.mark.parametrize(
    ("build_text", "expected"),
    [
        pytest.param(
            chain_build(b_cmd="cat $< > $@; echo B >> $@"),
            {A: "cached", B: "built", C: "built", D: "cached"},
            id="middle-cmd",
        ),
        pytest.param(
            chain_build(a_cmd="cat $< > $@; echo A >> $@"),
            {A: "built", B: "built", C: "built", D: "cached"},
            id="root-cmd",
        ),
        pytest.param(
            chain_build().replace('cmd = "echo d > $@"', 'cmd = "echo D > $@"'),
            {A: "cached", B: "cached", C: "cached", D: "built"},
            id="independent-cmd",
        ),
        pytest.param(
            chain_build().replace('outs = ["b.txt"]', 'outs = ["b2.txt"]'),
            {A: "cached", B: "built", C: "built", D: "cached"},
            id="middle-outs",
        ),
    ],
)
def test_changing_an_identity_attribute_reruns_it_and_its_dependents(chain, build_text, expected):
    ws, first = chain
    set_build(ws, build_text)
    second = build_json(ws, "//pkg:all")
    assert statuses(second) == expected
    for label, status in expected.items():
        if status == "cached":
            assert second["by_label"][label]["key"] == first["by_label"][label]["key"]
        else:
            assert second["by_label"][label]["key"] != first["by_label"][label]["key"]
    third = build_json(ws, "//pkg:all")
    assert set(statuses(third).values()) == {"cached"}


def _reformatted() -> str:
    # Same targets: other quotes, other spacing, keyword order, trailing commas, order of targets.
    return """
genrule(name='d', cmd='echo d > $@', outs=['d.txt'])
genrule(outs=['c.txt'], name='c', srcs=[':b'], cmd='cat $< > $@; echo c >> $@',)
genrule(
  cmd   =   "cat $< > $@; echo b >> $@",
        srcs = [ ":a" ],
  name="b",   outs=["b.txt",],
)
genrule(name="a", srcs=["//pkg:in.txt"], outs=["a.txt"], cmd="cat $< > $@; echo a >> $@")
"""


def _renamed() -> str:
    return chain_build().replace('name = "b"', 'name = "b_renamed"').replace('srcs = [":b"]', 'srcs = [":b_renamed"]')


@pytest.mark.parametrize(
    ("build_text", "renames"),
    [
        pytest.param(chain_build().replace("# A chain of three", "# A comment, changed.\n# Another"), {}, id="comment"),
        pytest.param(_reformatted(), {}, id="formatting"),
        pytest.param(_renamed(), {B: "//pkg:b_renamed"}, id="rename"),
        pytest.param(
            chain_build().replace('name = "b",', 'name = "b",\n    description = "now described",'),
            {},
            id="description",
        ),
        pytest.param(
            chain_build().replace('name = "b",', 'name = "b",\n    resources = {"cpu": 2, "memory_gb": 1},'),
            {},
            id="resources",
        ),
        pytest.param(
            chain_build().replace('name = "b",', 'name = "b",\n    tags = ["slow", "nightly"],'), {}, id="tags"
        ),
    ],
)
def test_non_identity_changes_rerun_nothing(chain, build_text, renames):
    ws, first = chain
    set_build(ws, build_text)
    attempts_before = attempt_count(ws / "cache")
    second = build_json(ws, "//pkg:all")
    expected_labels = {renames.get(label, label) for label in (A, B, C, D)}
    assert set(statuses(second)) == expected_labels
    assert set(statuses(second).values()) == {"cached"}, statuses(second)
    for label in (A, B, C, D):
        assert second["by_label"][renames.get(label, label)]["key"] == first["by_label"][label]["key"]
    assert attempt_count(ws / "cache") == attempts_before


# -- 3. early cutoff ------------------------------------------------------------------------


def test_early_cutoff_spares_dependents_of_a_step_rebuilt_to_identical_bytes(make_workspace):
    build = """\
        genrule(name = "a", outs = ["a.txt"], cmd = {cmd!r})
        genrule(name = "b", srcs = [":a"], outs = ["b.txt"], cmd = "cat $< $< > $@")
        genrule(name = "c", srcs = [":b"], outs = ["c.txt"], cmd = "cat $< > $@; echo c >> $@")
        """
    ws = make_workspace({"pkg/BUILD.marin": build.format(cmd="echo hi > $@")})
    first = build_json(ws, "//pkg:all")
    assert set(statuses(first).values()) == {"built"}
    b_attempts = len(attempt_records(ws / "cache", first["by_label"][B]["key"]))

    set_build(ws, build.format(cmd="printf 'hi\\n' > $@"))
    second = build_json(ws, "//pkg:all")
    assert statuses(second) == {A: "built", B: "cached", C: "cached"}
    assert second["by_label"][A]["key"] != first["by_label"][A]["key"]
    assert second["by_label"][B]["key"] == first["by_label"][B]["key"]
    assert second["by_label"][C]["key"] == first["by_label"][C]["key"]
    assert len(attempt_records(ws / "cache", second["by_label"][B]["key"])) == b_attempts
    assert output_text(second, C, "c.txt") == "hi\nhi\nc\n"


# -- 4. sources: content counts, timestamps do not ---------------------------------------------


def test_editing_a_source_reruns_its_readers_and_their_dependents(chain):
    ws, first = chain
    (ws / "pkg" / "in.txt").write_text("other input\n")
    second = build_json(ws, "//pkg:all")
    assert statuses(second) == {A: "built", B: "built", C: "built", D: "cached"}
    assert output_text(second, C, "c.txt") == "other input\na\nb\nc\n"
    # Back to the old content: every key is an old key again, so all of it is cached.
    (ws / "pkg" / "in.txt").write_text("input\n")
    third = build_json(ws, "//pkg:all")
    assert set(statuses(third).values()) == {"cached"}
    assert keys(third) == keys(first)


def test_editing_a_source_to_the_same_size_is_detected(chain):
    ws, _ = chain
    source = ws / "pkg" / "in.txt"
    stat = source.stat()
    source.write_text("INPUT\n")  # same size
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same mtime
    second = build_json(ws, "//pkg:all")
    assert statuses(second) == {A: "built", B: "built", C: "built", D: "cached"}
    assert output_text(second, C, "c.txt") == "INPUT\na\nb\nc\n"


def test_touching_a_source_reruns_nothing(chain):
    ws, first = chain
    source = ws / "pkg" / "in.txt"
    future = time.time() + 3600
    os.utime(source, (future, future))
    second = build_json(ws, "//pkg:all")
    assert set(statuses(second).values()) == {"cached"}
    # Rewriting the same bytes (new mtime, ctime, maybe inode) is no change either.
    source.unlink()
    source.write_text("input\n")
    third = build_json(ws, "//pkg:all")
    assert set(statuses(third).values()) == {"cached"}
    assert keys(third) == keys(first)


GLOB_BUILD = """\
    filegroup(name = "data", srcs = glob(["data/*.txt"]))
    genrule(name = "joined", srcs = [":data"], outs = ["joined.txt"], cmd = "cat $(SRCS) > $@")
    genrule(name = "other", outs = ["other.txt"], cmd = "echo other > $@")
    """


def test_filegroup_over_glob(make_workspace):
    ws = make_workspace(
        {"pkg/BUILD.marin": GLOB_BUILD, "pkg/data/x.txt": "x\n", "pkg/data/y.txt": "y\n", "pkg/data/skip.md": "no\n"}
    )
    data, joined, other = "//pkg:data", "//pkg:joined", "//pkg:other"
    first = build_json(ws, "//pkg:all")
    assert set(statuses(first).values()) == {"built"}
    assert output_text(first, joined, "joined.txt") == "x\ny\n"
    group = Path(first["by_label"][data]["output"])
    assert sorted(p.relative_to(group).as_posix() for p in group.rglob("*") if p.is_file()) == [
        "pkg/data/x.txt",
        "pkg/data/y.txt",
    ]

    # Touch: nothing.
    future = time.time() + 3600
    os.utime(ws / "pkg/data/x.txt", (future, future))
    assert set(statuses(build_json(ws, "//pkg:all")).values()) == {"cached"}

    # A file outside the glob: nothing.
    (ws / "pkg/data/skip.md").write_text("changed\n")
    assert set(statuses(build_json(ws, "//pkg:all")).values()) == {"cached"}

    # Edit one file: the group and its reader, not the independent target.
    (ws / "pkg/data/y.txt").write_text("why\n")
    edited = build_json(ws, "//pkg:all")
    assert statuses(edited) == {data: "built", joined: "built", other: "cached"}
    assert output_text(edited, joined, "joined.txt") == "x\nwhy\n"

    # A new file matching the glob.
    (ws / "pkg/data/z.txt").write_text("z\n")
    added = build_json(ws, "//pkg:all")
    assert statuses(added) == {data: "built", joined: "built", other: "cached"}
    assert output_text(added, joined, "joined.txt") == "x\nwhy\nz\n"

    # A removed one.
    (ws / "pkg/data/x.txt").unlink()
    removed = build_json(ws, "//pkg:all")
    assert statuses(removed) == {data: "built", joined: "built", other: "cached"}
    assert output_text(removed, joined, "joined.txt") == "why\nz\n"


# -- 11. keys hold no names and no paths ------------------------------------------------------


def test_rename_keeps_the_key(chain):
    ws, first = chain
    set_build(ws, _renamed().replace('name = "d"', 'name = "d_too"'))
    second = build_json(ws, "//pkg:all")
    assert keys(second) == {
        A: first["by_label"][A]["key"],
        "//pkg:b_renamed": first["by_label"][B]["key"],
        C: first["by_label"][C]["key"],
        "//pkg:d_too": first["by_label"][D]["key"],
    }
    assert set(statuses(second).values()) == {"cached"}


def test_moving_a_package_keeps_keys_of_targets_without_sources(make_workspace):
    build = 'genrule(name = "g", outs = ["g.txt"], cmd = "echo g > $@")\n'
    ws = make_workspace({"one/BUILD.marin": build})
    first = build_json(ws, "//one:g")
    (ws / "one").rename(ws / "two")
    second = build_json(ws, "//two:g")
    assert statuses(second) == {"//two:g": "cached"}
    assert second["targets"][0]["key"] == first["targets"][0]["key"]


def test_store_copied_elsewhere_serves_everything_cached(chain, tmp_path):
    ws, first = chain
    shutil.copytree(ws / "cache", ws / "other_dir")
    copied = build_json(ws, "//pkg:all", store="other_dir")
    assert set(statuses(copied).values()) == {"cached"}
    assert keys(copied) == keys(first)
    for item in copied["targets"]:
        assert Path(item["output"]).is_relative_to(ws / "other_dir")
    assert output_text(copied, C, "c.txt") == "input\na\nb\nc\n"


def test_store_moved_outside_the_workspace_serves_everything_cached(chain, tmp_path):
    ws, first = chain
    elsewhere = tmp_path / "moved" / "store"
    elsewhere.parent.mkdir()
    (ws / "cache").rename(elsewhere)  # the old location is gone
    moved = build_json(ws, "//pkg:all", store=str(elsewhere))
    assert set(statuses(moved).values()) == {"cached"}
    assert keys(moved) == keys(first)
    assert not (ws / "cache" / "ac").exists()
    # file:// URLs name the same store.
    as_url = build_json(ws, "//pkg:all", store=f"file://{elsewhere}")
    assert set(statuses(as_url).values()) == {"cached"}


def test_workspace_moved_keeps_every_key(chain, tmp_path):
    ws, first = chain
    moved = tmp_path / "somewhere" / "else"
    moved.parent.mkdir()
    ws.rename(moved)
    second = build_json(moved, "//pkg:all")
    assert set(statuses(second).values()) == {"cached"}
    assert keys(second) == keys(first)


def test_store_salt_disowns_every_result(chain):
    ws, first = chain
    metadata = ws / "cache" / "store.json"
    data = json.loads(metadata.read_text())
    assert data["salt"] == ""
    metadata.write_text(json.dumps({**data, "salt": "v2"}))
    second = build_json(ws, "//pkg:all")
    assert set(statuses(second).values()) == {"built"}
    assert all(second["by_label"][label]["key"] != first["by_label"][label]["key"] for label in (A, B, C, D))


# -- concurrent builds share the store ------------------------------------------------------


def test_two_concurrent_builds_run_each_step_once(make_workspace):
    build = (
        "".join(f'genrule(name = "s{i}", outs = ["s{i}.txt"], cmd = "sleep 0.3; echo {i} > $@")\n' for i in range(4))
        + 'genrule(name = "top", srcs = [":s0", ":s1", ":s2", ":s3"], outs = ["top.txt"], cmd = "cat $(SRCS) > $@")\n'
    )
    ws = make_workspace({"pkg/BUILD.marin": build})
    command = cli_command(ws, "build", "--json", "--jobs", "2", "//pkg:all")
    processes = [
        subprocess.Popen(command, cwd=ws, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
        for _ in range(2)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=CLI_TIMEOUT_S)
        assert process.returncode == 0, err
        results.append(parse_json_output(out))
    assert keys(results[0]) == keys(results[1])
    for label, key in keys(results[0]).items():
        records = attempt_records(ws / "cache", key)
        assert len(records) == 1, f"{label} ran {len(records)} times"
        assert records[0]["status"] == "succeeded"
        # Exactly one of the two builds ran it.
        assert sorted(r["by_label"][label]["status"] for r in results) == ["built", "cached"]
    assert output_text(results[0], "//pkg:top", "top.txt") == "0\n1\n2\n3\n"
    assert not [p for p in store_files(ws / "cache") if p.startswith("tmp/")], "staging left behind"


def test_editing_a_loaded_star_file_reruns_what_it_defines(make_workspace):
    ws = make_workspace(
        {
            "pkg/defs.star": (
                'MESSAGE = "one"\n'
                "def shout(name):\n"
                '    genrule(name = name, outs = [name + ".txt"], cmd = "echo " + MESSAGE + " > $@")\n'
            ),
            "pkg/BUILD.marin": """\
                load(":defs.star", "shout")
                shout("loud")
                genrule(name = "quiet", outs = ["quiet.txt"], cmd = "echo quiet > $@")
                """,
        }
    )
    first = build_json(ws, "//pkg:all")
    assert statuses(first) == {"//pkg:loud": "built", "//pkg:quiet": "built"}
    assert set(statuses(build_json(ws, "//pkg:all")).values()) == {"cached"}
    (ws / "pkg" / "defs.star").write_text((ws / "pkg" / "defs.star").read_text().replace('"one"', '"two"'))
    second = build_json(ws, "//pkg:all")
    assert statuses(second) == {"//pkg:loud": "built", "//pkg:quiet": "cached"}
    assert output_text(second, "//pkg:loud", "loud.txt") == "two\n"
