"""`marinbuild query`: every function and output format, with exact output and order.

One hand-built workspace, a small experiment: data -> tokenizer -> tokenized -> two
training runs -> a report, a macro from a .star file, a manual target, source files.
Queries go through the Python API (`Session.query`), which is what the CLI prints; the
printed order is Bazel's (each target before its dependencies, ties by label).
"""

from __future__ import annotations

import json

import pytest
from helpers_workspace import new_workspace

from marinbuild.commands.query import query as run_query
from marinbuild.errors import GraphError, LoadError, QueryError
from marinbuild.session import Session

FILES = {
    "rules/BUILD.marin": "",
    "rules/macros.star": """\
        def shout(name, src):
            genrule(name = name, srcs = [src], outs = [name + ".txt"], cmd = "tr a-z A-Z < $< > $@")
        """,
    "data/BUILD.marin": """\
        load("//rules:macros.star", "shout")

        genrule(name = "raw", srcs = ["raw.txt"], outs = ["raw.out"], cmd = "cat $< > $@")
        genrule(
            name = "clean",
            srcs = [":raw", "stopwords.txt"],
            outs = ["clean.txt"],
            cmd = "cat $(SRCS) > $@",
            description = "Deduplicated text.",
        )
        shout("loud", ":clean")
        """,
    "data/raw.txt": "hello world\n",
    "data/stopwords.txt": "the\n",
    "data/unused.txt": "never mentioned\n",
    "tok/BUILD.marin": """\
        genrule(name = "bpe", srcs = ["//data:clean"], outs = ["bpe.json"], cmd = "wc -c < $< > $@")
        genrule(name = "tokenized", srcs = [":bpe", "//data:clean"], outs = ["tokens.txt"], cmd = "cat $(SRCS) > $@")
        """,
    "train/BUILD.marin": """\
        py_step(
            name = "small",
            fn = "steps.py:train",
            config = {"optimizer": {"lr": 0.001, "name": "adam"}, "steps": 10},
            deps = ["//tok:tokenized"],
        )
        py_step(
            name = "large",
            fn = "steps.py:train",
            config = {"optimizer": {"lr": 0.0003, "name": "adam"}, "steps": 1000},
            deps = ["//tok:tokenized"],
            tags = ["manual"],
        )
        genrule(name = "report", srcs = [":small", ":large"], outs = ["report.txt"], cmd = "cat $(SRCS) > $@")
        """,
    "train/steps.py": "def train(ctx):\n    (ctx.out / 'model.txt').write_text('ok')\n",
}

SMALL_DEPS = [
    "//train:small",
    "//train:steps.py",
    "//tok:tokenized",
    "//tok:bpe",
    "//data:clean",
    "//data:stopwords.txt",
    "//data:raw",
    "//data:raw.txt",
]


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return new_workspace(tmp_path_factory.mktemp("query") / "ws", FILES)


def query(ws, expression: str, output: str = "label", keep_going: bool = False, cwd=None) -> str:
    return run_query(Session.open(ws, cwd=cwd or ws), expression, keep_going).render(output)


def labels(ws, expression: str, **kwargs) -> list[str]:
    return query(ws, expression, **kwargs).splitlines()


# -- target patterns ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("//train:small", ["//train:small"]),
        ("//data:raw.txt", ["//data:raw.txt"]),
        ('"//data:raw.txt"', ["//data:raw.txt"]),
        # A file that no target mentions is still a file of the package.
        ("//data:unused.txt", ["//data:unused.txt"]),
        # Unlike a build, a query's wildcards include manual targets.
        ("//train:all", ["//train:report", "//train:small", "//train:large"]),
        (
            "//data:*",
            [
                "//data:loud",
                "//data:clean",
                "//data:stopwords.txt",
                "//data:raw",
                "//data:raw.txt",
                "//data:BUILD.marin",
            ],
        ),
        ("//tok:all-targets", ["//tok:tokenized", "//tok:bpe", "//tok:BUILD.marin"]),
        (
            "//...",
            [
                "//train:report",
                "//train:small",
                "//train:large",
                "//tok:tokenized",
                "//tok:bpe",
                "//data:loud",
                "//data:clean",
                "//data:raw",
            ],
        ),
        ("//t...", None),
    ],
)
def test_target_patterns(ws, expression, expected):
    if expected is None:
        with pytest.raises(QueryError):
            labels(ws, expression)
    else:
        assert labels(ws, expression) == expected


def test_relative_patterns_resolve_against_the_current_directory(ws):
    assert labels(ws, ":all", cwd=ws / "tok") == ["//tok:tokenized", "//tok:bpe"]
    assert labels(ws, "deps(:bpe, 1)", cwd=ws / "tok") == ["//tok:bpe", "//data:clean"]


# -- dependencies ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("deps(//train:small)", SMALL_DEPS),
        ("deps(//train:small, 0)", ["//train:small"]),
        ("deps(//train:small, 1)", ["//train:small", "//train:steps.py", "//tok:tokenized"]),
        (
            "deps(//train:small, 2)",
            ["//train:small", "//train:steps.py", "//tok:tokenized", "//tok:bpe", "//data:clean"],
        ),
        ("deps(//data:loud)", ["//data:loud", "//data:clean", "//data:stopwords.txt", "//data:raw", "//data:raw.txt"]),
        (
            "rdeps(//..., //data:raw.txt)",
            [
                "//train:report",
                "//train:small",
                "//train:large",
                "//tok:tokenized",
                "//tok:bpe",
                "//data:loud",
                "//data:clean",
                "//data:raw",
                "//data:raw.txt",
            ],
        ),
        ("rdeps(//..., //tok:bpe, 1)", ["//tok:tokenized", "//tok:bpe"]),
        ("rdeps(//..., //tok:bpe, 2)", ["//train:small", "//train:large", "//tok:tokenized", "//tok:bpe"]),
        # The universe bounds the answer: //train:large is not in deps(//train:small).
        ("rdeps(//train:small, //data:clean)", ["//train:small", "//tok:tokenized", "//tok:bpe", "//data:clean"]),
        ("rdeps(//data:all, //tok:bpe)", []),
        (
            "allpaths(//train:report, //data:clean)",
            ["//train:report", "//train:small", "//train:large", "//tok:tokenized", "//tok:bpe", "//data:clean"],
        ),
        (
            "allpaths(//train:small, //data:stopwords.txt + //train:steps.py)",
            [
                "//train:small",
                "//train:steps.py",
                "//tok:tokenized",
                "//tok:bpe",
                "//data:clean",
                "//data:stopwords.txt",
            ],
        ),
        ("allpaths(//data:raw, //tok:bpe)", []),
        # A shortest path (breadth-first, dependencies in attribute order) from the first start
        # in label order that reaches an end, printed from start to end.
        (
            "somepath(//train:report, //data:raw.txt)",
            ["//train:report", "//train:small", "//tok:tokenized", "//data:clean", "//data:raw", "//data:raw.txt"],
        ),
        ("somepath(//train:small + //data:loud, //data:clean)", ["//data:loud", "//data:clean"]),
        ("somepath(//data:raw, //tok:bpe)", []),
    ],
)
def test_dependency_functions(ws, expression, expected):
    assert labels(ws, expression) == expected


# -- filters -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("kind(genrule, deps(//train:small))", ["//tok:tokenized", "//tok:bpe", "//data:clean", "//data:raw"]),
        ("kind(py_step, //...)", ["//train:small", "//train:large"]),
        ('kind("source file", deps(//train:small))', ["//train:steps.py", "//data:stopwords.txt", "//data:raw.txt"]),
        ('kind("^genrule rule$", //data:*)', ["//data:loud", "//data:clean", "//data:raw"]),
        ("kind(rule, //tok:*)", ["//tok:tokenized", "//tok:bpe"]),
        (r'filter("\.txt$", deps(//train:small))', ["//data:stopwords.txt", "//data:raw.txt"]),
        ("filter(//tok, deps(//train:small))", ["//tok:tokenized", "//tok:bpe"]),
        ("filter(:ra, //...)", ["//data:raw"]),
        ("attr(tags, manual, //...)", ["//train:large"]),
        (r'attr(tags, "^\[\]$", //train:all)', ["//train:report", "//train:small"]),
        (r'attr(srcs, "\[//data:raw, //data:stopwords.txt\]", //...)', ["//data:clean"]),
        ("attr(cmd, SRCS, //...)", ["//train:report", "//tok:tokenized", "//data:clean"]),
        ("attr(description, Dedup, //...)", ["//data:clean"]),
        # Rules without the attribute are left out, whatever the pattern.
        ('attr(config, ".*", //...)', ["//train:small", "//train:large"]),
        # Nested config keys by dotted name (a marinbuild extension); numbers match as written.
        ('attr(config.optimizer.lr, "^0.001$", //...)', ["//train:small"]),
        ("attr(config.steps, 1000, //...)", ["//train:large"]),
        ("attr(config.optimizer.name, adam, //...)", ["//train:small", "//train:large"]),
        ("attr(config.optimizer.momentum, '.*', //...)", []),
        ("attr(config, 'optimizer: {lr: 0.001, name: adam}', //...)", ["//train:small"]),
        (
            "labels(srcs, //train:report + //data:clean)",
            ["//train:small", "//train:large", "//data:stopwords.txt", "//data:raw"],
        ),
        ("labels(fn, //train:all)", ["//train:steps.py"]),
        ("labels(deps, //train:small)", ["//tok:tokenized"]),
        ("labels(nope, //train:small)", []),
        ("some(//train:all)", ["//train:large"]),
        ("some(//train:all, 2)", ["//train:report", "//train:large"]),
        ("some(//train:small, 5)", ["//train:small"]),
        ("siblings(//tok:bpe)", ["//tok:tokenized", "//tok:bpe", "//tok:BUILD.marin"]),
        ("siblings(//data:raw.txt) - //data:*", []),
        ("buildfiles(//data:loud)", ["//rules:macros.star", "//rules:BUILD.marin", "//data:BUILD.marin"]),
        ("buildfiles(//tok:bpe + //train:small)", ["//train:BUILD.marin", "//tok:BUILD.marin"]),
    ],
)
def test_filters_and_helpers(ws, expression, expected):
    assert labels(ws, expression) == expected


def test_some_of_nothing_is_an_error(ws):
    with pytest.raises(QueryError) as caught:
        labels(ws, "//tok:all - some(//tok:bpe + //data:raw) + some(//tok:all ^ //data:all)")
    assert caught.value.reason == "some() of an empty set"
    assert caught.value.column == 44


# -- set operations and variables --------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("//tok:all + //data:raw", ["//tok:tokenized", "//tok:bpe", "//data:raw"]),
        ("//tok:all union //data:raw", ["//tok:tokenized", "//tok:bpe", "//data:raw"]),
        ("deps(//tok:bpe) ^ //data:*", ["//data:clean", "//data:stopwords.txt", "//data:raw", "//data:raw.txt"]),
        ("deps(//tok:bpe) intersect //data:all", ["//data:clean", "//data:raw"]),
        ("//... - //train:all", ["//tok:tokenized", "//tok:bpe", "//data:loud", "//data:clean", "//data:raw"]),
        ("//... except deps(//train:small)", ["//train:report", "//train:large", "//data:loud"]),
        # Equal precedence, left to right: (//data:all - //data:raw) + //data:raw.
        ("//data:all - //data:raw + //data:raw", ["//data:loud", "//data:clean", "//data:raw"]),
        ("//data:all - (//data:raw + //data:clean)", ["//data:loud"]),
        ("//data:all ^ //data:raw + //tok:bpe", ["//tok:bpe", "//data:raw"]),
        ("set(//tok:bpe //data:raw.txt :bpe)", ["//tok:bpe", "//data:raw.txt"]),
        ("set()", []),
        ("let t = deps(//tok:bpe) in kind(genrule, $t) - $t", []),
        ("let t = deps(//tok:bpe) in $t - kind(rule, $t)", ["//data:stopwords.txt", "//data:raw.txt"]),
        ("let a = //tok:all in let b = $a - //tok:bpe in $b + $a", ["//tok:tokenized", "//tok:bpe"]),
        ("let intersect_ = //tok:bpe in $intersect_", ["//tok:bpe"]),
    ],
)
def test_set_operations_and_variables(ws, expression, expected):
    assert labels(ws, expression, cwd=ws / "tok") == expected


# -- output formats ----------------------------------------------------------------------------


def test_label_kind_output(ws):
    assert query(ws, "deps(//data:loud)", output="label_kind") == (
        "genrule rule //data:loud\n"
        "genrule rule //data:clean\n"
        "source file //data:stopwords.txt\n"
        "genrule rule //data:raw\n"
        "source file //data:raw.txt\n"
    )


def test_build_output_expands_macros_and_leaves_defaults_out(ws):
    assert query(ws, "deps(//data:loud, 1) + //data:stopwords.txt", output="build") == (
        "# data/BUILD.marin:11\n"
        "genrule(\n"
        '    name = "loud",\n'
        '    srcs = ["//data:clean"],\n'
        '    outs = ["loud.txt"],\n'
        '    cmd = "tr a-z A-Z < $< > $@",\n'
        ")\n"
        "\n"
        "# data/BUILD.marin:4\n"
        "genrule(\n"
        '    name = "clean",\n'
        '    srcs = ["//data:raw", "//data:stopwords.txt"],\n'
        '    outs = ["clean.txt"],\n'
        '    cmd = "cat $(SRCS) > $@",\n'
        '    description = "Deduplicated text.",\n'
        ")\n"
        "\n"
        "# source file //data:stopwords.txt\n"
    )


def test_build_output_of_a_py_step(ws):
    assert query(ws, "//train:large", output="build") == (
        "# train/BUILD.marin:7\n"
        "py_step(\n"
        '    name = "large",\n'
        '    fn = "//train:steps.py:train",\n'
        '    config = {"optimizer": {"lr": 0.0003, "name": "adam"}, "steps": 1000},\n'
        '    deps = ["//tok:tokenized"],\n'
        '    tags = ["manual"],\n'
        ")\n"
    )


def test_graph_output(ws):
    assert query(ws, "deps(//tok:tokenized, 2) - //data:raw", output="graph") == (
        "digraph mygraph {\n"
        "  node [shape=box];\n"
        '  "//tok:tokenized"\n'
        '  "//tok:tokenized" -> "//tok:bpe"\n'
        '  "//tok:tokenized" -> "//data:clean"\n'
        '  "//tok:bpe"\n'
        '  "//tok:bpe" -> "//data:clean"\n'
        '  "//data:clean"\n'
        '  "//data:clean" -> "//data:stopwords.txt"\n'
        '  "//data:stopwords.txt"\n'
        "}\n"
    )


def test_json_output(ws):
    assert json.loads(query(ws, "deps(//data:raw)", output="json")) == [
        {
            "label": "//data:raw",
            "kind": "genrule rule",
            "attributes": {
                "name": "raw",
                "tags": [],
                "description": "",
                "resources": {},
                "timeout": None,
                "srcs": ["//data:raw.txt"],
                "outs": ["raw.out"],
                "cmd": "cat $< > $@",
            },
            "deps": ["//data:raw.txt"],
        },
        {"label": "//data:raw.txt", "kind": "source file", "attributes": {}, "deps": []},
    ]


def test_json_deps_list_every_dependency_even_outside_the_result(ws):
    (item,) = json.loads(query(ws, "//train:small", output="json"))
    assert item["deps"] == ["//train:steps.py", "//tok:tokenized"]


@pytest.mark.parametrize("output", ["label", "label_kind", "build"])
def test_empty_result_prints_nothing(ws, output):
    assert query(ws, "//tok:all - //tok:all", output=output) == ""


def test_empty_result_in_json_and_graph(ws):
    assert query(ws, "set()", output="json") == "[]\n"
    assert query(ws, "set()", output="graph") == "digraph mygraph {\n  node [shape=box];\n}\n"


# -- loading -----------------------------------------------------------------------------------


def test_a_query_loads_only_the_packages_it_reaches(tmp_path):
    partly_broken = new_workspace(
        tmp_path / "ws",
        {
            "a/BUILD.marin": 'genrule(name = "a", srcs = ["//b:b"], outs = ["a"], cmd = "x")\n',
            "b/BUILD.marin": 'genrule(name = "b", outs = ["b"], cmd = "x")\n',
            "broken/BUILD.marin": "genrule(\n",
        },
    )
    assert labels(partly_broken, "deps(//a:a)") == ["//a:a", "//b:b"]
    assert labels(partly_broken, "rdeps(//a:all + //b:all, //b:b)") == ["//a:a", "//b:b"]
    with pytest.raises(LoadError):
        labels(partly_broken, "rdeps(//..., //b:b)")


def test_a_broken_dependency_is_an_error_at_its_build_line(tmp_path):
    broken = new_workspace(
        tmp_path / "ws", {"p/BUILD.marin": 'genrule(name = "a", srcs = [":nope"], outs = ["a"], cmd = "x")\n'}
    )
    with pytest.raises(GraphError) as caught:
        labels(broken, "deps(//p:a)")
    assert (
        str(caught.value)
        == "p/BUILD.marin:1: //p:a depends on '//p:nope', which is neither a target of //p nor a file in it"
    )
    assert labels(broken, "//p:all") == ["//p:a"]  # the edge is only followed by a traversal


def test_cycles_do_not_hang_a_query(tmp_path):
    cyclic = new_workspace(
        tmp_path / "ws",
        {
            "p/BUILD.marin": (
                'filegroup(name = "a", srcs = [":b"])\n'
                'filegroup(name = "b", srcs = [":a"])\n'
                'filegroup(name = "c", srcs = [":a"])\n'
            )
        },
    )
    assert labels(cyclic, "deps(//p:c)") == ["//p:c", "//p:a", "//p:b"]
    assert labels(cyclic, "rdeps(//..., //p:b)") == ["//p:c", "//p:a", "//p:b"]
    assert labels(cyclic, "somepath(//p:c, //p:b)") == ["//p:c", "//p:a", "//p:b"]
