"""Files outside the workspace that a rule declares as external inputs are part of its key.

python_corpus relies on this for the interpreter's standard library: its output must be
rebuilt when those files change, and not when they are merely touched.
"""

from __future__ import annotations

import os
from pathlib import Path

from conftest import build_json, keys, statuses

RULE_MODULE = """
from pathlib import Path

from marinbuild.targets import Attr, Rule
from marinbuild.targets import attrs as types

OUTSIDE = Path({outside!r})


def _copy(ctx):
    (ctx.out / "copy.txt").write_bytes(OUTSIDE.read_bytes())


copy_outside = Rule(
    name="copy_outside",
    impl=_copy,
    attrs={{"note": Attr(types.STRING, default="")}},
    external_inputs=lambda attrs: {{"data.txt": OUTSIDE}},
)
"""


def _workspace(make_workspace, outside: Path, name: str | None = None) -> Path:
    return make_workspace(
        {
            "myrules.py": RULE_MODULE.format(outside=str(outside)),
            "p/BUILD.marin": (
                'copy_outside(name = "c")\ngenrule(name = "d", srcs = [":c"], outs = ["d.txt"], cmd = "cat $< > $@")\n'
            ),
        },
        config='rules = ["myrules"]\n',
        name=name,
    )


def test_editing_an_external_input_reruns_the_step_and_touching_it_does_not(make_workspace, tmp_path):
    outside = tmp_path / "outside" / "data.txt"
    outside.parent.mkdir()
    outside.write_text("one\n")
    ws = _workspace(make_workspace, outside)
    first = build_json(ws, "//p:all")
    assert statuses(first) == {"//p:c": "built", "//p:d": "built"}

    stat = outside.stat()
    os.utime(outside, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    touched = build_json(ws, "//p:all")
    assert statuses(touched) == {"//p:c": "cached", "//p:d": "cached"}

    outside.write_text("two\n")
    edited = build_json(ws, "//p:all")
    assert statuses(edited) == {"//p:c": "built", "//p:d": "built"}
    assert keys(edited)["//p:c"] != keys(first)["//p:c"]


def test_the_key_follows_content_not_location(make_workspace, tmp_path):
    here, there = tmp_path / "a" / "data.txt", tmp_path / "b" / "data.txt"
    for path in (here, there):
        path.parent.mkdir()
        path.write_text("same bytes\n")
    first = keys(build_json(_workspace(make_workspace, here), "//p:c"))
    second = keys(build_json(_workspace(make_workspace, there, name="twin"), "//p:c"))
    assert first["//p:c"] == second["//p:c"]
