"""Labels and target patterns: parsing, and how patterns expand against a workspace."""

from __future__ import annotations

import json

import pytest
from helpers_workspace import build, error_line, new_workspace, plan, requested, run_cli, store_is_untouched

from marinbuild.errors import GraphError, LabelError, MarinbuildError
from marinbuild.labels import Label, PatternKind, parse_label, parse_pattern

# -- labels --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "package", "expected"),
    [
        ("//a/b:c", None, Label("a/b", "c")),
        ("//a/b:c", "x/y", Label("a/b", "c")),  # absolute labels ignore the current package
        ("//a/b", None, Label("a/b", "b")),  # short for //a/b:b
        ("//a", None, Label("a", "a")),
        ("//:c", None, Label("", "c")),  # the root package
        (":c", "a/b", Label("a/b", "c")),
        ("c", "a/b", Label("a/b", "c")),
        (":c", "", Label("", "c")),
        ("data/x.txt", "a", Label("a", "data/x.txt")),  # names may contain '/'
        ("//a:data/x.txt", None, Label("a", "data/x.txt")),
        ("//a-b/c_d.e+f:x-y_z.+=,@~#", None, Label("a-b/c_d.e+f", "x-y_z.+=,@~#")),
        ("//a:all", None, Label("a", "all")),  # 'all' is only special in patterns
    ],
)
def test_parse_label(text, package, expected):
    assert parse_label(text, package) == expected


@pytest.mark.parametrize(
    ("label", "text"),
    [
        (Label("a/b", "c"), "//a/b:c"),
        (Label("", "c"), "//:c"),
        (Label("a", "d/e.txt"), "//a:d/e.txt"),
    ],
)
def test_label_str_is_canonical_and_round_trips(label, text):
    assert str(label) == text
    assert parse_label(text) == label


def test_short_form_is_printed_in_full():
    assert str(parse_label("//a/b")) == "//a/b:b"


def test_labels_are_values():
    assert parse_label(":c", "a") == parse_label("//a:c") == Label("a", "c")
    assert len({parse_label(":c", "a"), parse_label("//a:c"), parse_label("//a")}) == 2
    assert sorted([Label("b", "a"), Label("a", "z"), Label("a", "b")]) == [
        Label("a", "b"),
        Label("a", "z"),
        Label("b", "a"),
    ]
    assert Label("a", "b").sibling("c") == Label("a", "c")


@pytest.mark.parametrize(
    ("text", "package", "message"),
    [
        ("//a/../b:c", None, "invalid package path 'a/../b' in '//a/../b:c'"),
        ("//../a:c", None, "invalid package path '../a' in '//../a:c'"),
        ("//a/./b:c", None, "invalid package path 'a/./b' in '//a/./b:c'"),
        ("//a//b:c", None, "invalid package path 'a//b' in '//a//b:c'"),
        ("//a/:c", None, "invalid package path 'a/' in '//a/:c'"),
        ("///a:c", None, "invalid package path '/a' in '///a:c'"),
        ("//a b:c", None, "invalid package path 'a b' in '//a b:c'"),
        ("//a:", None, "empty target name in '//a:'"),
        ("//:", None, "empty target name in '//:'"),
        ("//", None, "'//' names no target"),
        ("//a:b c", None, "invalid target name 'b c' in '//a:b c'"),
        ("//a:b:c", None, "invalid target name 'b:c' in '//a:b:c'"),
        ("//a:../x", None, "invalid target name '../x' in '//a:../x'"),
        ("//a:x/../y", None, "invalid target name 'x/../y' in '//a:x/../y'"),
        ("//a:x//y", None, "invalid target name 'x//y' in '//a:x//y'"),
        ("//a:x*", None, "invalid target name 'x*' in '//a:x*'"),
        ("//a:x\n", None, "invalid target name 'x\n' in '//a:x\n'"),
        (":", "a", "empty target name in ':'"),
        ("", "a", "empty target name in ''"),
        ("..", "a", "invalid target name '..' in '..'"),
        (":c", None, "':c' is relative but no package is known"),
        ("c", None, "'c' is relative but no package is known"),
        ("a:b", "x", "invalid label 'a:b'"),
    ],
)
def test_bad_labels_are_rejected_with_a_clear_message(text, package, message):
    with pytest.raises(LabelError) as caught:
        parse_label(text, package)
    assert caught.value.message == message
    assert isinstance(caught.value, MarinbuildError)


def test_bad_package_path_has_a_hint():
    with pytest.raises(LabelError) as caught:
        parse_label("//a/../b:c")
    assert caught.value.hint and "'..'" in caught.value.hint


def test_non_string_label_is_rejected():
    with pytest.raises(LabelError, match=r"^expected a label string, got int 3$"):
        parse_label(3)  # type: ignore[arg-type]


# -- patterns ------------------------------------------------------------------------------

T, P, R = PatternKind.TARGET, PatternKind.PACKAGE, PatternKind.RECURSIVE


@pytest.mark.parametrize(
    ("text", "cwd", "kind", "package", "name", "negative"),
    [
        ("//a/b:c", "", T, "a/b", "c", False),
        ("//a/b:c", "x/y", T, "a/b", "c", False),
        ("//a/b", "", T, "a/b", "b", False),
        ("//:c", "", T, "", "c", False),
        ("//a:all", "", P, "a", None, False),
        ("//a:*", "", P, "a", None, False),
        ("//a:all-targets", "", P, "a", None, False),
        ("//:all", "", P, "", None, False),
        ("//a/b/...", "", R, "a/b", None, False),
        ("//...", "", R, "", None, False),
        ("//...", "x/y", R, "", None, False),
        ("//a/...:all", "", R, "a", None, False),
        ("//a/...:*", "", R, "a", None, False),
        ("//...:all-targets", "", R, "", None, False),
        ("-//a:b", "", T, "a", "b", True),
        ("-//a:all", "", P, "a", None, True),
        ("-//a/...", "", R, "a", None, True),
        # relative to the current directory inside the workspace
        (":all", "experiments/hello", P, "experiments/hello", None, False),
        (":*", "experiments/hello", P, "experiments/hello", None, False),
        (":c", "experiments/hello", T, "experiments/hello", "c", False),
        ("...", "experiments/hello", R, "experiments/hello", None, False),
        ("...:all", "experiments", R, "experiments", None, False),
        ("...", "", R, "", None, False),
        (":all", "", P, "", None, False),
        ("hello:all", "experiments", P, "experiments/hello", None, False),
        ("hello:c", "experiments", T, "experiments/hello", "c", False),
        ("hello/...", "experiments", R, "experiments/hello", None, False),
        ("-:c", "experiments/hello", T, "experiments/hello", "c", True),
        ("-...", "experiments", R, "experiments", None, True),
    ],
)
def test_parse_pattern(text, cwd, kind, package, name, negative):
    pattern = parse_pattern(text, cwd)
    assert (pattern.kind, pattern.package, pattern.name, pattern.negative) == (kind, package, name, negative)
    assert pattern.text == text


def test_target_pattern_label():
    assert parse_pattern(":c", "a/b").label == Label("a/b", "c")
    assert parse_pattern("//a/b").label == Label("a/b", "b")


@pytest.mark.parametrize(
    ("text", "cwd", "message"),
    [
        ("", "", "empty target pattern ''"),
        ("-", "", "empty target pattern '-'"),
        ("//", "", "'//' names no target"),
        ("-//", "", "'-//' names no target"),
        ("//a:", "", "empty target name in '//a:'"),
        (":", "", "empty target name in ':'"),
        ("//a/../b:c", "", "invalid package path 'a/../b' in '//a/../b:c'"),
        ("//a b:all", "", "invalid package path 'a b' in '//a b:all'"),
        ("//a:b c", "", "invalid target name 'b c' in '//a:b c'"),
        ("//a/...:foo", "", "'//a/...:foo': a recursive pattern can only be followed by ':all'"),
        ("//../...", "", "invalid package path '..' in '//../...'"),
        ("../x:y", "a/b", "invalid package path 'a/b/../x' in '../x:y'"),
    ],
)
def test_bad_patterns_are_rejected(text, cwd, message):
    with pytest.raises(LabelError) as caught:
        parse_pattern(text, cwd)
    assert caught.value.message == message


def test_recursive_pattern_covers_packages_below_its_root_only():
    pattern = parse_pattern("//a/b/...")
    assert pattern.covers_package("a/b")
    assert pattern.covers_package("a/b/c")
    assert not pattern.covers_package("a/bc")
    assert not pattern.covers_package("a")
    assert parse_pattern("//...").covers_package("anything/at/all")


# -- expanding patterns against a workspace ------------------------------------------------

PATTERN_WORKSPACE = {
    "BUILD.marin": """\
        filegroup(name = "root")
        """,
    "p/BUILD.marin": """\
        filegroup(name = "a")
        filegroup(name = "m", tags = ["manual"])
        filegroup(name = "uses_m", srcs = [":m"])
        filegroup(name = "z", tags = ["other", "manual"])
        """,
    "p/sub/BUILD.marin": """\
        filegroup(name = "s")
        """,
    "p/sub/deeper/BUILD.marin": """\
        filegroup(name = "d")
        """,
    "p/nobuild/deeper/BUILD.marin": """\
        filegroup(name = "e")
        """,
    "q/BUILD.marin": """\
        filegroup(name = "q")
        filegroup(name = "q2")
        """,
    "empty/BUILD.marin": "",
    "hidden/.dot/BUILD.marin": 'filegroup(name = "h")\n',
}


@pytest.fixture(scope="module")
def pattern_ws(tmp_path_factory):
    return new_workspace(tmp_path_factory.mktemp("patterns") / "ws", PATTERN_WORKSPACE)


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        (["//p:all"], ["//p:a", "//p:uses_m"]),
        (["//p:*"], ["//p:a", "//p:uses_m"]),
        (["//p:all-targets"], ["//p:a", "//p:uses_m"]),
        (["//p:m"], ["//p:m"]),  # manual: buildable by exact label
        (["//p:z", "//p:a"], ["//p:z", "//p:a"]),
        (["//p:a", "//p:a"], ["//p:a"]),
        (["//q"], ["//q:q"]),  # //q means //q:q
    ],
)
def test_package_and_exact_patterns(pattern_ws, patterns, expected):
    assert requested(pattern_ws, *patterns) == expected


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        (
            ["//..."],
            [
                "//:root",
                "//p:a",
                "//p:uses_m",
                "//p/nobuild/deeper:e",
                "//p/sub:s",
                "//p/sub/deeper:d",
                "//q:q",
                "//q:q2",
            ],
        ),
        (["//p/..."], ["//p:a", "//p:uses_m", "//p/nobuild/deeper:e", "//p/sub:s", "//p/sub/deeper:d"]),
        (["//p/sub/..."], ["//p/sub:s", "//p/sub/deeper:d"]),
        (["//p/nobuild/..."], ["//p/nobuild/deeper:e"]),  # the root of '...' need not be a package
        (["//p/...:all"], ["//p:a", "//p:uses_m", "//p/nobuild/deeper:e", "//p/sub:s", "//p/sub/deeper:d"]),
    ],
)
def test_recursive_patterns(pattern_ws, patterns, expected):
    assert requested(pattern_ws, *patterns) == expected


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        (["//...", "-//p/..."], ["//:root", "//q:q", "//q:q2"]),
        (["//p/...", "-//p/sub/...", "-//p:a"], ["//p:uses_m", "//p/nobuild/deeper:e"]),
        (["//q:all", "-//q:q"], ["//q:q2"]),
        (["//q:all", "-//q:all"], None),  # nothing left
        # Order matters, as in Bazel: a subtraction only removes what came before it.
        (["-//q:q", "//q:all"], ["//q:q", "//q:q2"]),
        (["//q:all", "-//q:q", "//q:q"], ["//q:q2", "//q:q"]),
        (["//q:q", "-//p:m"], ["//q:q"]),  # subtracting what is not there is fine
    ],
)
def test_subtraction_order_matters(pattern_ws, patterns, expected):
    if expected is None:
        with pytest.raises(GraphError, match=r"match no targets"):
            requested(pattern_ws, *patterns)
    else:
        assert requested(pattern_ws, *patterns) == expected


def test_manual_targets_are_left_out_of_wildcards_but_built_as_dependencies(pattern_ws):
    graph = plan(pattern_ws, "//p:all")
    assert graph.requested == ["//p:a", "//p:uses_m"]
    # //p:uses_m depends on the manual target, so it is part of the graph all the same.
    assert set(graph.targets) == {"//p:a", "//p:uses_m", "//p:m"}
    assert graph.order.index("//p:m") < graph.order.index("//p:uses_m")


@pytest.mark.parametrize(
    ("cwd", "patterns", "expected"),
    [
        ("p", [":all"], ["//p:a", "//p:uses_m"]),
        ("p", [":m"], ["//p:m"]),
        ("p", ["..."], ["//p:a", "//p:uses_m", "//p/nobuild/deeper:e", "//p/sub:s", "//p/sub/deeper:d"]),
        ("p/sub", ["..."], ["//p/sub:s", "//p/sub/deeper:d"]),
        ("p", ["sub:all"], ["//p/sub:s"]),
        ("p", ["sub/..."], ["//p/sub:s", "//p/sub/deeper:d"]),
        ("p", ["...", "-sub/..."], ["//p:a", "//p:uses_m", "//p/nobuild/deeper:e"]),
        ("p", ["//q:all"], ["//q:q", "//q:q2"]),  # absolute patterns ignore cwd
        ("p/nobuild", ["..."], ["//p/nobuild/deeper:e"]),
        ("", [":all"], ["//:root"]),
    ],
)
def test_relative_patterns_resolve_against_the_current_directory(pattern_ws, cwd, patterns, expected):
    assert requested(pattern_ws, *patterns, cwd=pattern_ws / cwd) == expected


def test_relative_pattern_outside_the_workspace_is_relative_to_its_root(pattern_ws, tmp_path):
    assert requested(pattern_ws, ":all", cwd=tmp_path) == ["//:root"]


def test_hidden_directories_are_not_searched(pattern_ws):
    assert not any("hidden" in label for label in requested(pattern_ws, "//..."))


def test_empty_package_matches_nothing(pattern_ws):
    with pytest.raises(GraphError) as caught:
        requested(pattern_ws, "//empty:all")
    assert caught.value.message == "the patterns //empty:all match no targets"


@pytest.mark.parametrize(
    ("patterns", "message"),
    [
        (["//p:nope"], "no target 'nope' in package //p"),
        (["//p"], "no target 'p' in package //p"),
        (["//nope:all"], "'//nope:all': no package '//nope'"),
        (["//nope:x"], "'//nope:x': no package '//nope'"),
        (["//p/nobuild:all"], "'//p/nobuild:all': no package '//p/nobuild'"),
        (["//nope/..."], "'//nope/...': directory 'nope' does not exist"),
        (["-//p:a"], "no target patterns given"),
        ([], "no target patterns given"),
    ],
)
def test_patterns_naming_nothing_are_errors(pattern_ws, patterns, message):
    with pytest.raises(GraphError) as caught:
        requested(pattern_ws, *patterns)
    assert caught.value.message == message


def test_unknown_target_suggests_close_names(pattern_ws):
    with pytest.raises(GraphError) as caught:
        requested(pattern_ws, "//p:used_m")
    assert caught.value.hint == "did you mean 'uses_m'?"


def test_store_inside_the_workspace_is_not_searched(tmp_path):
    ws = new_workspace(
        tmp_path / "ws",
        {"p/BUILD.marin": 'filegroup(name = "a")\n', "mystore/x/BUILD.marin": 'filegroup(name = "no")\n'},
        config='store = "mystore"\n',
    )
    assert requested(ws, "//...") == ["//p:a"]


# -- the CLI -------------------------------------------------------------------------------


def _dry_run_labels(result) -> list[str]:
    assert result.rc == 0, result.stderr
    assert result.stdout.startswith("{"), f"expected JSON on stdout, got:\n{result.stdout}"
    return [item["label"] for item in json.loads(result.stdout)["targets"]]


def test_cli_relative_patterns_inside_the_workspace(tmp_path):
    ws = new_workspace(
        tmp_path / "ws",
        {
            "experiments/hello/BUILD.marin": 'filegroup(name = "one")\nfilegroup(name = "two")\n',
            "experiments/hello/more/BUILD.marin": 'filegroup(name = "three")\n',
            "other/BUILD.marin": 'filegroup(name = "other")\n',
        },
    )
    hello = ws / "experiments" / "hello"
    # No --workspace: it is found from the current directory; `build` is the default command.
    plain = run_cli([":all", "--dry-run", "--json"], cwd=hello)
    assert _dry_run_labels(plain) == ["//experiments/hello:one", "//experiments/hello:two"]
    recursive = run_cli(["build", "--dry-run", "--json", "..."], cwd=hello)
    assert _dry_run_labels(recursive) == [
        "//experiments/hello:one",
        "//experiments/hello:two",
        "//experiments/hello/more:three",
    ]
    subtracted = run_cli(["build", "--dry-run", "--json", "...", "-:two"], cwd=hello)
    assert _dry_run_labels(subtracted) == ["//experiments/hello:one", "//experiments/hello/more:three"]
    assert store_is_untouched(ws)


def test_cli_negative_pattern_first_is_not_taken_for_an_option(tmp_path):
    ws = new_workspace(tmp_path / "ws", {"q/BUILD.marin": 'filegroup(name = "q")\nfilegroup(name = "q2")\n'})
    assert _dry_run_labels(build(ws, "--dry-run", "--json", "-//q:q", "//q:all")) == ["//q:q", "//q:q2"]
    assert _dry_run_labels(build(ws, "--dry-run", "--json", "//q:all", "-//q:q")) == ["//q:q2"]


def test_cli_double_dash_ends_options(tmp_path):
    ws = new_workspace(tmp_path / "ws", {"q/BUILD.marin": 'filegroup(name = "q")\nfilegroup(name = "kin")\n'})
    assert _dry_run_labels(build(ws, "--dry-run", "--json", "--", "//q:all", "-//q:kin")) == ["//q:q"]


@pytest.mark.parametrize("name", ["kin", "hi", "job"])
def test_cli_negative_pattern_is_not_split_into_short_options(tmp_path, name):
    """`-//q:kin` is a subtraction, not `-k -n` plus a pattern '-//q:i' (nor `-h`, nor `-j ob`)."""
    ws = new_workspace(tmp_path / "ws", {"q/BUILD.marin": f'filegroup(name = "q")\nfilegroup(name = "{name}")\n'})
    result = build(ws, "--dry-run", "--json", "//q:all", f"-//q:{name}")
    assert _dry_run_labels(result) == ["//q:q"]


def test_cli_bad_pattern_is_a_label_error(tmp_path):
    ws = new_workspace(tmp_path / "ws", {"q/BUILD.marin": 'filegroup(name = "q")\n'})
    result = build(ws, "//q/../q:q")
    assert result.rc == 2
    assert error_line(result.stderr) == "marinbuild: error: invalid package path 'q/../q' in '//q/../q:q'"
    assert "  hint: package paths are" in result.stderr
    assert store_is_untouched(ws)


@pytest.mark.parametrize("name", ["b", "x", "a"])
def test_cli_prints_labels_verbatim(tmp_path, name):
    """Progress lines are plain text: `//p:b:` must not be rendered as an emoji shortcode."""
    ws = new_workspace(tmp_path / "ws", {"p/BUILD.marin": f'genrule(name = "{name}", outs = ["x"], cmd = "exit 3")\n'})
    result = build(ws, f"//p:{name}")
    assert result.rc == 1, result.stderr
    assert f"] failed //p:{name}: command exited with status 3" in result.stderr, result.stderr
