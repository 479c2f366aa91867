"""Differential test: `marinbuild query` against real `bazel query` on the same graph.

One spec of genrules and source files is written twice, as a Bazel workspace (WORKSPACE
and BUILD files) and as a marinbuild workspace (BUILD.marin files), and each query is
run by both. Needs `bazel` (Bazel 4: `apt-get install bazel-bootstrap`); without it the tests
skip, or fail under MARINBUILD_REQUIRE_TOOLS=1 as in .ci/run.

What is compared: the labels of rule targets and source files. Left out of Bazel's
answer are its implicit `@bazel_tools` targets (every genrule depends on a setup
script) and the generated-file targets Bazel makes of each `outs` entry (marinbuild has
no such targets); Bazel's `//pkg:BUILD` is marinbuild's `//pkg:BUILD.marin`.

The sets must be equal, and for the queries marked `ordered` so must the printed order.
Both print Bazel's default order (a topological order with ties broken by label) over
the edges of the result; Bazel only knows the edges it has traversed (not those out of
a target that a pattern or `siblings` named but no traversal left), so for a few set
operations its order differs, and those compare as sets. `somepath` queries have a
single shortest path, so that "some path" is one answer.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import require_tool, write_files

from marinbuild.commands.query import query
from marinbuild.session import Session

BAZEL_TIMEOUT_S = 300

# package -> [(name, srcs, tags)]; a src without ':' is a source file of the package.
SPEC: dict[str, list[tuple[str, list[str], list[str]]]] = {
    "a": [
        ("top", [":mid", "//c:leaf", "top.txt"], ["manual"]),
        ("mid", [":low", "mid.txt", "//a/sub:deep"], []),
        ("low", ["low.txt"], []),
        ("zz", ["//a/sub:deep", "//a-b:y", "//a.b:z"], []),
    ],
    "a/sub": [("deep", ["deep.txt"], ["slow"])],
    "a-b": [("y", [], [])],
    "a.b": [("z", ["//c:base"], [])],
    "b": [("x", [":w", "//c:leaf"], []), ("w", ["w.txt", "//c:base"], ["slow", "manual"])],
    "c": [("leaf", [":base", "leaf.txt"], []), ("base", ["base.txt"], [])],
}

QUERIES: list[tuple[str, bool]] = [  # (expression, ordered)
    # deps
    ("deps(//a:top)", True),
    ("deps(//a:top, 1)", True),
    ("deps(//a:top, 2)", True),
    ("deps(//b:all)", True),
    ("deps(//...)", True),
    # rdeps
    ("rdeps(//..., //c:base)", True),
    ("rdeps(//..., //c:base.txt)", True),
    ("rdeps(//..., //c:base, 1)", True),
    ("rdeps(//..., //c:base, 2)", True),
    ("rdeps(//a:top, //c:base)", True),
    ("rdeps(//a/..., //a/sub:deep.txt)", True),
    # allpaths and somepath
    ("allpaths(//a:top, //c:base)", True),
    ("allpaths(//..., //c:leaf.txt)", True),
    ("allpaths(//a:all, //a/sub:deep)", True),
    ("allpaths(//c:base, //a:top)", True),
    ("somepath(//a:top, //a:low.txt)", True),
    ("somepath(//a:zz, //c:base.txt)", True),
    ("somepath(//c:base, //a:top)", True),
    # kind
    ("kind(genrule, //...)", True),
    ("kind(rule, deps(//a:top))", True),
    ('kind("source file", deps(//...))', True),
    ('kind("^genrule rule$", deps(//b:x))', True),
    # filter
    (r'filter("\.txt$", deps(//...))', True),
    ("filter(//c, deps(//a:top))", True),
    ("filter(sub, //...)", True),
    # attr
    ("attr(tags, manual, //...)", True),
    ("attr(tags, slow, deps(//...))", True),
    (r'attr(tags, "^\[\]$", //...)', True),
    (r'attr(srcs, "\[\]", //...)', True),
    ("attr(srcs, //c:leaf, //...)", True),
    (r'attr(srcs, "^\[//c:base, //c:leaf.txt\]$", //...)', True),
    ("attr(cmd, echo, //...)", True),
    ('attr(name, "^[lm]", //...)', True),
    # set operations and variables
    ("//a:all + //b:all", True),
    ("//a/... union //c:all", False),
    ("//... - //a/...", True),
    ("//... except deps(//a:top)", True),
    ("deps(//a:top) ^ //c:*", True),
    ("deps(//a:top) intersect deps(//b:x)", True),
    ("//a:all - //a:top + //c:base", False),
    ("(//a:all - //a:top) ^ deps(//a:mid)", True),
    ("let v = deps(//a:top) in $v - kind(rule, $v)", True),
    ("set(//a:top //b:x //c:base.txt)", False),
    ("//a:*", True),
    ("siblings(//c:base)", False),
    ("labels(srcs, //a:mid + //b:x)", False),
    ("buildfiles(//a:zz)", False),
]


def _srcs_text(srcs: list[str]) -> str:
    return "[" + ", ".join(f'"{src}"' for src in srcs) + "]"


def _build_file(rules: list[tuple[str, list[str], list[str]]]) -> str:
    """The same genrules for both tools (genrule has the same attributes in each)."""
    blocks = []
    for name, srcs, tags in rules:
        cmd = "cat $(SRCS) > $@" if srcs else "echo x > $@"
        blocks.append(
            f'genrule(\n    name = "{name}",\n    srcs = {_srcs_text(srcs)},\n    outs = ["{name}.out"],\n'
            f'    cmd = "{cmd}",\n    tags = {_srcs_text(tags)},\n)\n'
        )
    return "\n".join(blocks)


def _source_files() -> dict[str, str]:
    return {
        f"{package}/{src}": f"{src}\n"
        for package, rules in SPEC.items()
        for _name, srcs, _tags in rules
        for src in srcs
        if ":" not in src
    }


def _write(root: Path, build_file: str, top_file: str) -> Path:
    files = {f"{package}/{build_file}": _build_file(rules) for package, rules in SPEC.items()}
    write_files(root, {top_file: "", **files, **_source_files()})
    return root


GENERATED = {f"//{package}:{name}.out" for package, rules in SPEC.items() for name, _srcs, _tags in rules}


def _comparable(bazel_label: str) -> str | None:
    if bazel_label.startswith("@") or bazel_label in GENERATED:
        return None
    return bazel_label + ".marin" if bazel_label.endswith(":BUILD") else bazel_label


@pytest.fixture(scope="module")
def bazel_query(tmp_path_factory):
    bazel = require_tool("bazel", "the query language is checked against Bazel's (apt: bazel-bootstrap)")
    workspace = _write(tmp_path_factory.mktemp("bazel") / "ws", "BUILD", "WORKSPACE")
    # Bazel's server socket lives under the output root: keep its path short. The system
    # bazelrc stays (Debian's package points it at its install base); a user's does not.
    output_root = Path(tempfile.mkdtemp(prefix="mbq-bazel-"))
    startup = [bazel, f"--output_user_root={output_root}", "--nohome_rc", "--max_idle_secs=120"]

    def run(expression: str) -> list[str]:
        done = subprocess.run(
            [*startup, "query", "--noshow_progress", expression],
            cwd=workspace,
            capture_output=True,
            text=True,
            timeout=BAZEL_TIMEOUT_S,
        )
        assert done.returncode == 0, f"bazel query {expression!r} failed:\n{done.stderr}"
        return [label for line in done.stdout.splitlines() if (label := _comparable(line)) is not None]

    yield run
    subprocess.run([*startup, "shutdown"], cwd=workspace, capture_output=True, timeout=BAZEL_TIMEOUT_S)
    shutil.rmtree(output_root, ignore_errors=True)


@pytest.fixture(scope="module")
def marinbuild_query(tmp_path_factory):
    workspace = _write(tmp_path_factory.mktemp("marinbuild") / "ws", "BUILD.marin", "marinbuild.toml")
    return lambda expression: list(query(Session.open(workspace, cwd=workspace), expression).labels)


@pytest.mark.parametrize(("expression", "ordered"), QUERIES, ids=[expression for expression, _ordered in QUERIES])
def test_same_answer_as_bazel(bazel_query, marinbuild_query, expression, ordered):
    expected, actual = bazel_query(expression), marinbuild_query(expression)
    if ordered:
        assert actual == expected
    else:
        assert sorted(actual) == sorted(expected)
