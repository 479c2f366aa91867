"""Bad input: every mistake exits 2 with `marinbuild: error: FILE:LINE: MESSAGE` and writes nothing.

A representative set runs the real CLI in a subprocess; the variations go through the
Python API (PackageLoader, Session.plan), which raises the same errors the CLI prints.
"""

from __future__ import annotations

import pytest
from helpers_workspace import (
    assert_bad_input,
    assert_located,
    build,
    error_line,
    loader_for,
    new_workspace,
    plan,
    store_is_untouched,
)

from marinbuild.errors import GraphError, LoadError, MarinbuildError


def _snapshot(ws):
    return {
        p.relative_to(ws): p.read_bytes() if p.is_file() else None
        for p in ws.rglob("*")
        if ".marinbuild" not in p.relative_to(ws).parts
    }


# -- through the CLI -----------------------------------------------------------------------

CYCLE_BUILD = """\
    filegroup(name = "ok")

    filegroup(name = "a", srcs = [":b"])
    filegroup(
        name = "b",
        srcs = ["//q:c"],
    )
    """

CLI_CASES = {
    "syntax_error": (
        {"p/BUILD.marin": "genrule(\n    name = 'x',\n    outs = ['a']\n    cmd = 'true',\n)\n"},
        "//p:all",
        ("p/BUILD.marin", 4, "Parse error: unexpected identifier 'cmd' here"),
        None,
    ),
    "unknown_rule": (
        {"p/BUILD.marin": "# comment\n\ngen_rule(name = 'x')\n"},
        "//p:all",
        ("p/BUILD.marin", 3, "Variable `gen_rule` not found, did you mean `genrule`?"),
        None,
    ),
    "unknown_attribute": (
        {"p/BUILD.marin": "\ngenrule(\n    name = 'x',\n    outs = ['a'],\n    cmd = 'true',\n    src = [],\n)\n"},
        "//p:x",
        ("p/BUILD.marin", 2, "genrule 'x': unknown attribute 'src'"),
        "did you mean 'srcs'? genrule takes: name, tags, description, resources, timeout, srcs, outs, cmd",
    ),
    "missing_mandatory_attribute": (
        {"p/BUILD.marin": "filegroup(name = 'ok')\ngenrule(\n    name = 'x',\n    cmd = 'true',\n)\n"},
        "//p:ok",  # loading the package is enough: the error is not in the target asked for
        ("p/BUILD.marin", 2, "genrule 'x': missing mandatory attribute 'outs'"),
        None,
    ),
    "mistyped_attribute": (
        {"p/BUILD.marin": "\n\ngenrule(\n    name = 'x',\n    outs = 'a.txt',\n    cmd = 'true',\n)\n"},
        "//p:all",
        ("p/BUILD.marin", 3, "genrule 'x': attribute 'outs': expected a list of strings, got 'a.txt'"),
        None,
    ),
    "duplicate_target": (
        {"p/BUILD.marin": "filegroup(name = 'x')\n\n\nfilegroup(\n    name = 'x',\n)\n"},
        "//p:all",
        ("p/BUILD.marin", 4, "target 'x' is already defined at p/BUILD.marin:1"),
        None,
    ),
    "load_cycle": (
        {
            "p/BUILD.marin": "load('//rules:a.star', 'A')\nfilegroup(name = 'x')\n",
            "rules/a.star": "load(':b.star', 'B')\nA = B\n",
            "rules/b.star": "# b needs a\n\nload('//rules:a.star', 'A')\nB = 1\n",
        },
        "//p:x",
        ("rules/b.star", 3, "load cycle: rules/a.star -> rules/b.star -> rules/a.star"),
        None,
    ),
    "missing_star_file": (
        {"p/BUILD.marin": "filegroup(name = 'x')\n\nload('//rules:nope.star', 'm')\n"},
        "//p:x",
        ("p/BUILD.marin", 3, "load('//rules:nope.star'): no .star file rules/nope.star"),
        "load() takes '//pkg:file.star' or ':file.star'",
    ),
    "bad_label_in_attribute": (
        {"p/BUILD.marin": "\nfilegroup(\n    name = 'x',\n    srcs = ['//a/../b:c'],\n)\n"},
        "//p:x",
        ("p/BUILD.marin", 2, "filegroup 'x': attribute 'srcs': invalid package path 'a/../b' in '//a/../b:c'"),
        None,
    ),
    "label_of_missing_target": (
        {"p/BUILD.marin": "filegroup(name = 'ok')\n\nfilegroup(\n    name = 'x',\n    srcs = [':okk'],\n)\n"},
        "//p:x",
        ("p/BUILD.marin", 3, "//p:x depends on '//p:okk', which is neither a target of //p nor a file in it"),
        "did you mean 'ok'?",
    ),
    "label_of_missing_file_in_other_package": (
        {
            "p/BUILD.marin": "filegroup(name = 'x', srcs = ['//q:data.txt'])\n",
            "q/BUILD.marin": "",
            "q/data.txt.bak": "",
        },
        "//p:x",
        ("p/BUILD.marin", 1, "//p:x depends on '//q:data.txt', which is neither a target of //q nor a file in it"),
        None,
    ),
    "unknown_make_variable": (
        {"p/BUILD.marin": "\ngenrule(\n    name = 'x',\n    outs = ['a'],\n    cmd = 'echo $(FOO) > $@',\n)\n"},
        "//p:x",
        (
            "p/BUILD.marin",
            2,
            "genrule 'x': unknown variable '$(FOO)' in cmd; write '$$' for a literal '$' (e.g. '$$(date)')",
        ),
        None,
    ),
}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_bad_input(tmp_path, case):
    files, pattern, (file, line, message), hint = CLI_CASES[case]
    ws = new_workspace(tmp_path / "ws", files)
    before = _snapshot(ws)
    result = build(ws, pattern)
    assert_bad_input(result, ws, file, line, message)
    if hint is not None:
        assert f"\n  hint: {hint}\n" in result.stderr, result.stderr
    assert result.stdout == ""
    assert _snapshot(ws) == before


def test_cli_dependency_cycle_lists_the_whole_cycle(tmp_path):
    ws = new_workspace(
        tmp_path / "ws",
        {
            "p/BUILD.marin": CYCLE_BUILD,
            "q/BUILD.marin": "\n\nfilegroup(name = 'c', srcs = ['//p:a'])\n",
        },
    )
    result = build(ws, "//p:all")
    assert result.rc == 2
    assert result.stderr == (
        "marinbuild: error: p/BUILD.marin:3: dependency cycle:\n"
        "    //p:a  (p/BUILD.marin:3)\n"
        "    //p:b  (p/BUILD.marin:4)\n"
        "    //q:c  (q/BUILD.marin:3)\n"
        "    //p:a  (p/BUILD.marin:3)\n"
        "  hint: a target cannot depend on itself, directly or through others\n"
    )
    assert store_is_untouched(ws)


def test_cli_unknown_target_on_the_command_line(tmp_path):
    ws = new_workspace(tmp_path / "ws", {"p/BUILD.marin": "filegroup(name = 'train')\nfilegroup(name = 'eval')\n"})
    result = build(ws, "//p:train", "//p:trian")
    assert result.rc == 2
    assert result.stderr == "marinbuild: error: no target 'trian' in package //p\n  hint: did you mean 'train'?\n"
    assert store_is_untouched(ws)


def test_cli_unknown_package_on_the_command_line(tmp_path):
    ws = new_workspace(tmp_path / "ws", {"p/BUILD.marin": "filegroup(name = 'train')\n"})
    result = build(ws, "//nope:all")
    assert result.rc == 2
    assert error_line(result.stderr) == "marinbuild: error: '//nope:all': no package '//nope'"
    assert store_is_untouched(ws)


def test_cli_error_after_a_good_package_still_writes_nothing(tmp_path):
    """One bad package among good ones: nothing at all is built."""
    ws = new_workspace(
        tmp_path / "ws",
        {
            "a/BUILD.marin": "genrule(name = 'good', outs = ['o'], cmd = 'echo hi > $@')\n",
            "b/BUILD.marin": "genrule(name = 'bad', outs = ['o'], cmd = 'echo $(OUT) > $@')\n",
        },
    )
    result = build(ws, "//...")
    assert_bad_input(result, ws, "b/BUILD.marin", 1, "genrule 'bad': unknown variable '$(OUT)' in cmd")


# -- through the Python API ----------------------------------------------------------------


def _load_error(tmp_path, files, package="p") -> MarinbuildError:
    ws = new_workspace(tmp_path / "ws", files)
    with pytest.raises(LoadError) as caught:
        loader_for(ws).package(package)
    assert not (ws / "cache").exists()
    return caught.value


def _plan_error(tmp_path, files, *patterns) -> MarinbuildError:
    ws = new_workspace(tmp_path / "ws", files)
    with pytest.raises(MarinbuildError) as caught:
        plan(ws, *patterns)
    assert not (ws / "cache").exists()
    return caught.value


@pytest.mark.parametrize(
    ("source", "line", "message"),
    [
        ("filegroup(name='a')\n\nfilegroup(name = 'x)\n", 3, "Parse error: unfinished string literal"),
        ("filegroup(name='a')\n  filegroup(name='b')\n", 2, "Parse error: unexpected new indentation block"),
        ("filegroup(name='a'\nfilegroup(name='b')\n", 2, "Parse error: unexpected identifier 'filegroup'"),
        ("x = 1\nwhile True:\n    pass\n", 2, "Parse error: cannot use reserved keyword `while`"),
        ("\n\nfilegroup(name = 'a')\nx = 1 // 0\n", 4, "Floor division by zero"),
        ("\n\n\nfail('nope')\n", 4, "fail: nope"),
        ("filegroup(name = 'a', srcs = [undefined_name])\n", 1, "Variable `undefined_name` not found"),
    ],
)
def test_starlark_errors_are_located(tmp_path, source, line, message):
    error = _load_error(tmp_path, {"p/BUILD.marin": source})
    assert_located(str(error), "p/BUILD.marin", line, message)


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ("genrule(\n    name = 'x',", 2),  # no newline at the end
        ("genrule(\n    name = 'x',\n", 2),
        ("filegroup(name='a')\nfilegroup(\n    name = 'x',\n\n# trailing comment\n", 5),
    ],
)
def test_unclosed_bracket_is_reported_at_the_end_of_the_file(tmp_path, source, line):
    error = _load_error(tmp_path, {"p/BUILD.marin": source})
    assert error.location is not None and (error.location.file, error.location.line) == ("p/BUILD.marin", line)
    assert error.message.startswith("Parse error: unexpected new line here")


def test_errors_in_a_loaded_star_file_are_located_there(tmp_path):
    files = {"p/BUILD.marin": "load('//rules:m.star', 'mac')\n", "rules/m.star": "\ndef mac(name)\n    pass\n"}
    assert_located(str(_load_error(tmp_path, files)), "rules/m.star", 2, "Parse error: unexpected new line here")
    files = {"p/BUILD.marin": "load('//rules:m.star', 'X')\n", "rules/m.star": "\n\nX = {}['missing']\n"}
    assert_located(str(_load_error(tmp_path / "2", files)), "rules/m.star", 3, 'Key `"missing"` was not found')


@pytest.mark.parametrize(
    ("build_file", "extra", "line", "message"),
    [
        # a symbol the .star file does not define
        (
            "\nload('//rules:d.star', 'Y')\n",
            {"rules/d.star": "X = 1\n"},
            2,
            "Module has no symbol `Y`, did you mean `X`?",
        ),
        # a bad label
        (
            "load('//a/../b:m.star', 'm')\n",
            {},
            1,
            "load('//a/../b:m.star'): invalid package path 'a/../b' in '//a/../b:m.star'",
        ),
        # not a .star file
        (
            "\n\nload('//rules:defs.py', 'm')\n",
            {"rules/defs.py": "m = 1\n"},
            3,
            "load('//rules:defs.py'): no .star file rules/defs.py",
        ),
        # a missing file named relative to the package
        ("load(':gone.star', 'A')\n", {}, 1, "load(':gone.star'): no .star file p/gone.star"),
        # the path also appears in a comment above the load
        (
            "# helpers come from ':gone.star'\nload(':gone.star', 'A')\n",
            {},
            2,
            "load(':gone.star'): no .star file p/gone.star",
        ),
    ],
)
def test_bad_loads(tmp_path, build_file, extra, line, message):
    error = _load_error(tmp_path, {"p/BUILD.marin": build_file, **extra})
    assert_located(str(error), "p/BUILD.marin", line, message)


@pytest.mark.parametrize(
    ("files", "file", "line", "message"),
    [
        (
            {"p/BUILD.marin": "load(':a.star', 'A')\n", "p/a.star": "\n\nload(':a.star', 'A')\nA = 1\n"},
            "p/a.star",
            3,
            "load cycle: p/a.star -> p/a.star",
        ),
        (
            {
                "p/BUILD.marin": "load(':a.star', 'A')\n",
                "p/a.star": "load('//r:b.star', 'B')\nA = B\n",
                "r/b.star": "load('//r:c.star', 'C')\nB = C\n",
                "r/c.star": "\nload('//p:a.star', 'A')\nC = A\n",
            },
            "r/c.star",
            2,
            "load cycle: p/a.star -> r/b.star -> r/c.star -> p/a.star",
        ),
    ],
)
def test_load_cycles(tmp_path, files, file, line, message):
    assert_located(str(_load_error(tmp_path, files)), file, line, message)


NAME_HINT = "names use letters, digits and _-.+=,@~# separated by '/', without '.', '..' or empty parts"


@pytest.mark.parametrize(
    ("source", "line", "message", "hint"),
    [
        (
            "\n\nfilegroup(name='a', srcz=[])\n",
            3,
            "filegroup 'a': unknown attribute 'srcz'",
            "did you mean 'srcs'? filegroup takes: name, tags, description, resources, timeout, srcs",
        ),
        (
            "py_step(name='a', fn='s.py:f', conifg={})\n",
            1,
            "py_step 'a': unknown attribute 'conifg'",
            "did you mean 'config'? py_step takes: name, tags, description, resources, timeout, fn, config, deps",
        ),
        (
            "filegroup(name='a', banana=1)\n",
            1,
            "filegroup 'a': unknown attribute 'banana'",
            "filegroup takes: name, tags, description, resources, timeout, srcs",
        ),
        ("\npy_step(name = 'x')\n", 2, "py_step 'x': missing mandatory attribute 'fn'", None),
        ("\ngenrule(name = 'x', outs = ['a'])\n", 2, "genrule 'x': missing mandatory attribute 'cmd'", None),
        ("\nfilegroup(srcs = [])\n", 2, "filegroup() needs a string 'name'", None),
        ("filegroup(name = 3)\n", 1, "filegroup() needs a string 'name'", None),
        ("\nfilegroup(name = 'a b')\n", 2, "invalid target name 'a b' in 'a b'", NAME_HINT),
        ("filegroup(name = '../x')\n", 1, "invalid target name '../x' in '../x'", NAME_HINT),
    ],
)
def test_unknown_and_missing_attributes(tmp_path, source, line, message, hint):
    error = _load_error(tmp_path, {"p/BUILD.marin": source})
    assert_located(str(error), "p/BUILD.marin", line, message)
    assert error.hint == hint


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            "filegroup(name = 'x', tags = 'manual')",
            "filegroup 'x': attribute 'tags': expected a list of strings, got 'manual'",
        ),
        (
            "filegroup(name = 'x', srcs = ':a')",
            "filegroup 'x': attribute 'srcs': expected a list of labels, got str ':a'",
        ),
        ("filegroup(name = 'x', srcs = [1])", "filegroup 'x': attribute 'srcs': expected a label string, got int 1"),
        (
            "filegroup(name = 'x', description = 3)",
            "filegroup 'x': attribute 'description': expected a string, got int 3",
        ),
        (
            "genrule(name = 'x', outs = ['a'], cmd = True)",
            "genrule 'x': attribute 'cmd': expected a string, got bool True",
        ),
        ("filegroup(name = 'x', resources = [])", "filegroup 'x': attribute 'resources': expected a dict, got list []"),
        (
            "filegroup(name = 'x', resources = {'gpu': 1})",
            "filegroup 'x': unknown resource fields ['gpu']; "
            "known: accelerator, accelerator_count, cpu, hosts, memory_gb, slices",
        ),
        (
            "py_step(name = 'x', fn = 'steps:f')",
            "py_step 'x': attribute 'fn': expected 'FILE_LABEL:function' naming a .py file and a function, "
            "got 'steps:f'",
        ),
        (
            "py_step(name = 'x', fn = 's.py:f', config = {1: 2})",
            "py_step 'x': attribute 'config': dict keys must be strings, got int 1",
        ),
        (
            "filegroup(name = 'x', srcs = [':a', '//p:a'])",
            "filegroup 'x': attribute 'srcs': duplicate labels ['//p:a']",
        ),
        (
            "filegroup(name = 'x', srcs = ['a b'])",
            "filegroup 'x': attribute 'srcs': invalid target name 'a b' in 'a b'",
        ),
        ("filegroup(name = 'x', srcs = ['//q:'])", "filegroup 'x': attribute 'srcs': empty target name in '//q:'"),
        ("filegroup(name = 'x', srcs = ['//'])", "filegroup 'x': attribute 'srcs': '//' names no target"),
        (
            "genrule(name = 'x', outs = ['o'], cmd = '$(location //a/../b)')",
            "genrule 'x': attribute 'cmd': invalid package path 'a/../b' in '//a/../b'",
        ),
        # genrule's own checks
        ("genrule(name = 'x', outs = [], cmd = 'true')", "genrule 'x': genrule needs at least one entry in 'outs'"),
        (
            "genrule(name = 'x', outs = ['../o'], cmd = 'true')",
            "genrule 'x': output '../o' must be a relative path without '.', '..' or empty parts",
        ),
        (
            "genrule(name = 'x', outs = ['o', 'o'], cmd = 'true')",
            "genrule 'x': duplicate entries in 'outs': ['o', 'o']",
        ),
        (
            "genrule(name = 'x', outs = ['o', 'p'], cmd = 'echo > $@')",
            "genrule 'x': '$@' needs exactly one output, this genrule declares 2; use $(OUTS)",
        ),
        (
            "genrule(name = 'x', outs = ['o'], cmd = 'cat $(location :a) > $@')",
            "genrule 'x': '$(location //p:a)': the label must also be listed in srcs",
        ),
        (
            "genrule(name = 'x', outs = ['o'], cmd = 'echo $(HOME) > $@')",
            "genrule 'x': unknown variable '$(HOME)' in cmd; write '$$' for a literal '$' (e.g. '$$(date)')",
        ),
    ],
)
def test_mistyped_and_invalid_attributes(tmp_path, call, message):
    error = _load_error(tmp_path, {"p/BUILD.marin": f"filegroup(name = 'first')\n\n{call}\n"})
    assert_located(str(error), "p/BUILD.marin", 3, message)


def test_non_json_attribute_value_is_located(tmp_path):
    source = "def f():\n    pass\n\npy_step(\n    name = 's',\n    fn = 's.py:f',\n    config = {'a': f},\n)\n"
    error = _load_error(tmp_path, {"p/BUILD.marin": source})
    assert error.location is not None and (error.location.file, error.location.line) == ("p/BUILD.marin", 4)
    assert "function" in error.message


def test_errors_inside_macros_point_at_the_build_call(tmp_path):
    files = {
        "p/BUILD.marin": "load('//rules:m.star', 'outer')\n\nouter('ok')\n\nouter('x', bad = True)\n",
        "rules/m.star": "load(':n.star', 'inner')\ndef outer(name, bad = False):\n    inner(name, bad)\n",
        "rules/n.star": "def inner(name, bad):\n    genrule(name = name, outs = [] if bad else ['o'], cmd = 'true')\n",
    }
    assert_located(
        str(_load_error(tmp_path, files)), "p/BUILD.marin", 5, "genrule 'x': genrule needs at least one entry in 'outs'"
    )


MACROS = "def sweep(name, sizes):\n    for size in sizes:\n        one(name, size)\n\ndef one(name, size):\n"


@pytest.mark.parametrize(
    ("body", "line", "message", "called_at"),
    [
        ("    if size > 1:\n        fail('size %d is too big' % size)\n", 7, "fail: size 2 is too big", 5),
        ("    x = name + size\n", 6, "Operation `+` not supported for types `string` and `int`", 3),
    ],
)
def test_a_failure_inside_a_macro_names_the_build_call_that_ran_it(tmp_path, body, line, message, called_at):
    files = {
        "p/BUILD.marin": "load('//rules:m.star', 'sweep')\n\nsweep('a', [1])\n\nsweep('b', [1, 2])\n",
        "rules/m.star": MACROS + body,
    }
    error = str(_load_error(tmp_path, files))
    assert_located(error, "rules/m.star", line, message)
    assert error.endswith(f"(in a macro called at p/BUILD.marin:{called_at})"), error


def test_duplicate_target_through_a_macro(tmp_path):
    files = {
        "p/BUILD.marin": "load('//rules:m.star', 'm')\n\nm('x')\n\nm('x')\n",
        "rules/m.star": "def m(name):\n    filegroup(name = name)\n",
    }
    assert_located(
        str(_load_error(tmp_path, files)), "p/BUILD.marin", 5, "target 'x' is already defined at p/BUILD.marin:3"
    )


def test_glob_with_no_match_is_located(tmp_path):
    error = _load_error(
        tmp_path, {"p/BUILD.marin": "filegroup(name = 'a')\n\nfilegroup(name = 'x', srcs = glob(['*.txt']))\n"}
    )
    assert_located(str(error), "p/BUILD.marin", 3, "glob(['*.txt']) matched no files in //p")


@pytest.mark.parametrize("pattern", ["../*.txt", "/etc/*", "a/../../*"])
def test_glob_outside_the_package_is_located(tmp_path, pattern):
    error = _load_error(
        tmp_path, {"p/BUILD.marin": f"\nfilegroup(name = 'x', srcs = glob(['{pattern}']))\n", "p/a/x.txt": ""}
    )
    assert_located(str(error), "p/BUILD.marin", 2, f"glob pattern '{pattern}' must stay inside the package")


@pytest.mark.parametrize(
    "star",
    [
        "X = 1\nfilegroup(name = 'from_star')\n",
        "def m():\n    filegroup(name = 'from_star')\nm()\nX = 1\n",
    ],
)
def test_rules_cannot_be_called_at_the_top_level_of_a_star_file(tmp_path, star):
    """Only BUILD files (and macros they call) declare targets; a .star file is shared by many."""
    files = {"p/BUILD.marin": "load('//rules:d.star', 'X')\n", "rules/d.star": star}
    error = _load_error(tmp_path, files)
    assert error.location is not None and error.location.file == "rules/d.star", str(error)
    assert error.message.startswith("filegroup() can only be called while loading a BUILD.marin file"), str(error)


def test_errors_do_not_leak_from_one_package_to_the_next(tmp_path):
    ws = new_workspace(
        tmp_path / "ws",
        {
            "p/BUILD.marin": "load('//rules:bad.star', 'X')\n",
            "rules/bad.star": "\nX = 1 // 0\n",
            "q/BUILD.marin": "filegroup(name = 'q')\n",
            "r/BUILD.marin": "\n\nfilegroup(name = 'r', srcz = [])\n",
        },
    )
    loader = loader_for(ws)
    with pytest.raises(LoadError) as first:
        loader.package("p")
    assert_located(str(first.value), "rules/bad.star", 2, "Floor division by zero")
    assert list(loader.package("q").targets) == ["q"]
    with pytest.raises(LoadError) as second:
        loader.package("r")
    assert_located(str(second.value), "r/BUILD.marin", 3, "filegroup 'r': unknown attribute 'srcz'")
    with pytest.raises(LoadError) as again:
        loader.package("p")
    assert str(again.value) == str(first.value)


# -- graph errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "pattern", "file", "line", "message"),
    [
        (
            {"p/BUILD.marin": "\nfilegroup(name = 'x', srcs = ['//nope:y'])\n"},
            "//p:x",
            "p/BUILD.marin",
            2,
            "//p:x depends on '//nope:y', but there is no package '//nope'",
        ),
        (
            {"p/BUILD.marin": "\nfilegroup(name = 'x', srcs = ['missing.txt'])\n"},
            "//p:all",
            "p/BUILD.marin",
            2,
            "//p:x depends on '//p:missing.txt', which is neither a target of //p nor a file in it",
        ),
        (
            # a file that belongs to a subpackage must be named through it
            {
                "p/BUILD.marin": "\n\nfilegroup(name = 'x', srcs = ['sub/f.txt'])\n",
                "p/sub/BUILD.marin": "",
                "p/sub/f.txt": "",
            },
            "//p:x",
            "p/BUILD.marin",
            3,
            "label '//p:sub/f.txt' crosses into package '//p/sub'",
        ),
        (
            # the error names the target that holds the bad label, in its own package
            {
                "p/BUILD.marin": "filegroup(name = 'x', srcs = ['//q:y'])\n",
                "q/BUILD.marin": "filegroup(name = 'y', srcs = [':z'])\n\n\nfilegroup(name = 'z', srcs = ['//q:w'])\n",
            },
            "//p:x",
            "q/BUILD.marin",
            4,
            "//q:z depends on '//q:w', which is neither a target of //q nor a file in it",
        ),
        (
            {
                "p/BUILD.marin": "filegroup(name = 'x', srcs = ['//q:y'])\n",
                "q/BUILD.marin": "\n\ngenrule(name = 'y', cmd = 'x')\n",
            },
            "//p:x",
            "q/BUILD.marin",
            3,
            "genrule 'y': missing mandatory attribute 'outs'",
        ),
    ],
)
def test_labels_naming_nothing(tmp_path, files, pattern, file, line, message):
    assert_located(str(_plan_error(tmp_path, files, pattern)), file, line, message)


@pytest.mark.parametrize(
    ("links", "leads_to"),
    [
        ({"data.txt": "renamed.txt"}, "nothing (no such file)"),
        ({"data.txt": "other.txt", "other.txt": "data.txt"}, "a loop of symlinks"),
    ],
)
def test_a_source_symlink_that_leads_nowhere_is_named(tmp_path, links, leads_to):
    build_file = "\n\ngenrule(name = 'x', srcs = ['data.txt'], outs = ['x.txt'], cmd = 'cat $< > $@')\n"
    ws = new_workspace(tmp_path / "ws", {"p/BUILD.marin": build_file})
    for link, target in links.items():
        (ws / "p" / link).symlink_to(target)
    message = f"//p:x depends on '//p:data.txt', but p/data.txt is a symlink to '{links['data.txt']}', which leads to"
    assert_bad_input(build(ws, "//p:x"), ws, "p/BUILD.marin", 3, f"{message} {leads_to}")


def test_crossing_into_a_subpackage_has_a_hint(tmp_path):
    files = {
        "p/BUILD.marin": "filegroup(name = 'x', srcs = ['sub/deep/f.txt'])\n",
        "p/sub/BUILD.marin": "",
        "p/sub/deep/f.txt": "",
    }
    assert _plan_error(tmp_path, files, "//p:x").hint == "refer to it as '//p/sub:deep/f.txt'"


@pytest.mark.parametrize(
    ("files", "pattern", "cycle"),
    [
        (
            {"p/BUILD.marin": "\nfilegroup(name = 'a', srcs = [':a'])\n"},
            "//p:a",
            [("//p:a", "p/BUILD.marin:2"), ("//p:a", "p/BUILD.marin:2")],
        ),
        (
            {
                "p/BUILD.marin": (
                    "filegroup(name = 'a', srcs = [':b'])\n"
                    "filegroup(name = 'b', srcs = [':c'])\n"
                    "filegroup(name = 'c', srcs = [':a'])\n"
                )
            },
            "//p:b",
            [
                ("//p:b", "p/BUILD.marin:2"),
                ("//p:c", "p/BUILD.marin:3"),
                ("//p:a", "p/BUILD.marin:1"),
                ("//p:b", "p/BUILD.marin:2"),
            ],
        ),
        (
            # a path into the cycle is not part of it
            {
                "p/BUILD.marin": "filegroup(name = 'top', srcs = ['//q:a'])\n",
                "q/BUILD.marin": (
                    "\nfilegroup(name = 'a', srcs = [':b'])\n"
                    "\ngenrule(name = 'b', srcs = ['f.txt', ':a'], outs = ['o'], cmd = 'true')\n"
                ),
                "q/f.txt": "",
            },
            "//p:top",
            [("//q:a", "q/BUILD.marin:2"), ("//q:b", "q/BUILD.marin:4"), ("//q:a", "q/BUILD.marin:2")],
        ),
        (
            # through a macro: each target is placed at its BUILD call
            {
                "p/BUILD.marin": "load('//rules:m.star', 'pair')\n\n\npair('x', '//q:y')\n",
                "q/BUILD.marin": "load('//rules:m.star', 'pair')\npair('y', '//p:x')\n",
                "rules/m.star": "def pair(name, dep):\n    filegroup(name = name, srcs = [dep])\n",
            },
            "//...",
            [("//p:x", "p/BUILD.marin:4"), ("//q:y", "q/BUILD.marin:2"), ("//p:x", "p/BUILD.marin:4")],
        ),
    ],
)
def test_dependency_cycles_list_every_step(tmp_path, files, pattern, cycle):
    error = _plan_error(tmp_path, files, pattern)
    assert isinstance(error, GraphError)
    steps = "\n".join(f"    {label}  ({where})" for label, where in cycle)
    assert error.message == f"dependency cycle:\n{steps}"
    assert str(error.location) == cycle[0][1]


def test_unknown_targets_on_the_command_line(tmp_path):
    files = {"p/BUILD.marin": "filegroup(name = 'train_small')\nfilegroup(name = 'train_large')\n"}
    error = _plan_error(tmp_path, files, "//p:train_smal")
    assert isinstance(error, GraphError)
    assert error.message == "no target 'train_smal' in package //p"
    assert error.hint == "did you mean 'train_small', 'train_large'?"
    error = _plan_error(tmp_path / "2", files, "//p:eval")
    assert (error.message, error.hint) == ("no target 'eval' in package //p", None)


# -- a value out of its range in train_lm's dicts (rules/common/ranges.py) ----------------------

_TRAIN_LM = """\
filegroup(name = "tokens")

train_lm(
    name = "model",
    data = ":tokens",
    model = {{"hidden_dim": 32, "intermediate_dim": 128, "num_layers": 1, "num_heads": 2, "num_kv_heads": 2}},
    optimizer = {optimizer},
    trainer = {{"steps": 6}},
)
"""


@pytest.mark.parametrize(
    ("optimizer", "message"),
    [
        # Each used to load, train (a negative rate by gradient ascent) and be published.
        ('{"learning_rate": -3e-3}', "field 'learning_rate': expected > 0, got -0.003"),
        ('{"weight_decay": -0.1}', "field 'weight_decay': expected >= 0, got -0.1"),
        ('{"beta1": 1.5}', "field 'beta1': expected in [0, 1), got 1.5"),
        (
            '{"warmup": 2.5}',
            "field 'warmup': expected a fraction of the run in [0, 1] (a float) or a number of steps 0 or >= 2 "
            "(an int; Levanter reads 1 as the whole run), got 2.5",
        ),
        ('{"min_lr_ratio": 3.0}', "field 'min_lr_ratio': expected in [0, 1], got 3.0"),
        ('{"max_grad_norm": -1}', "field 'max_grad_norm': expected > 0 (None: no clipping), got -1.0"),
    ],
)
def test_cli_an_optimizer_value_out_of_range(tmp_path, optimizer, message):
    ws = new_workspace(
        tmp_path / "ws", {"p/BUILD.marin": _TRAIN_LM.format(optimizer=optimizer)}, 'rules = ["rules.lm.decls"]'
    )
    result = build(ws, "//p:model")
    assert_bad_input(result, ws, "p/BUILD.marin", 3, f"train_lm 'model': attribute 'optimizer': {message}")
