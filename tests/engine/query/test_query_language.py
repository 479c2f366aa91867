"""The query language itself: parsing, errors at their column, the command line.

Parsing is tested on the syntax tree; the command line in a subprocess, as a user runs
it (exit status 2 and one error line for bad input, warnings under --keep-going).
"""

from __future__ import annotations

import pytest
from helpers_workspace import error_line, new_workspace, run_cli, store_is_untouched

from marinbuild.errors import QueryError
from marinbuild.query.expressions import FunctionCall, Let, SetLiteral, SetOperation, TargetLiteral, Variable, Word
from marinbuild.query.parser import from_command_line, parse

# -- parsing -----------------------------------------------------------------------------------


def test_set_operators_have_equal_precedence_and_associate_left():
    a, b, c = TargetLiteral("//a", 1), TargetLiteral("//b", 15), TargetLiteral("//c", 25)
    assert parse("//a intersect //b union //c") == SetOperation("union", SetOperation("intersect", a, b, 5), c, 19)
    assert parse("//a ^ //b") == SetOperation("intersect", a, TargetLiteral("//b", 7), 5)
    assert parse("//a - //b + //c") == SetOperation(
        "union", SetOperation("except", a, TargetLiteral("//b", 7), 5), TargetLiteral("//c", 13), 11
    )


def test_parentheses_group():
    assert parse("//a - (//b + //c)") == SetOperation(
        "except",
        TargetLiteral("//a", 1),
        SetOperation("union", TargetLiteral("//b", 8), TargetLiteral("//c", 14), 12),
        5,
    )


def test_function_arguments_are_read_by_kind():
    assert parse("deps(//a, 2)") == FunctionCall("deps", (TargetLiteral("//a", 6), 2), 1)
    assert parse("kind('source file', deps(//a))") == FunctionCall(
        "kind", (Word("source file", 6), FunctionCall("deps", (TargetLiteral("//a", 26),), 21)), 1
    )
    assert parse("attr(config.optimizer.lr, 1e-3, //...)") == FunctionCall(
        "attr", (Word("config.optimizer.lr", 6), Word("1e-3", 27), TargetLiteral("//...", 33)), 1
    )


def test_let_binds_a_variable_in_its_body():
    assert parse("let v = //a in $v - //b") == Let(
        "v", TargetLiteral("//a", 9), SetOperation("except", Variable("v", 16), TargetLiteral("//b", 21), 19), 1
    )


def test_set_takes_words_and_quoted_keywords_are_words():
    assert parse("set(//a :b 'union')") == SetLiteral(
        (TargetLiteral("//a", 5), TargetLiteral(":b", 9), TargetLiteral("union", 12)), 1
    )
    assert parse('"//a:b+c"') == TargetLiteral("//a:b+c", 1)


@pytest.mark.parametrize(
    ("expression", "column", "message"),
    [
        ("deps(", 6, "expected an expression, got the end of the query"),
        ("deps(//a", 9, "expected ')' to close deps( (it takes 1 to 2 arguments), got the end of the query"),
        ("deps(//a, x)", 11, "deps() expects a non-negative integer here, got 'x'"),
        ("deps(//a, -1)", 11, "deps() expects a non-negative integer here, got 'except'"),
        ("deps(//a, 1, 2)", 12, "expected ')' to close deps( (it takes 1 to 2 arguments), got ','"),
        ("rdeps(//...)", 12, "expected ',' between the arguments of rdeps() (it takes 2 to 3 arguments), got ')'"),
        ("kind((genrule), //a)", 6, "kind() expects a word here, got '('"),
        ("dep(//a)", 1, "unknown function 'dep'"),
        ("//a + + //b", 7, "expected an expression, got 'union'"),
        ("//a //b", 5, "unexpected '//b' after a complete expression"),
        ("(//a + //b", 11, "expected ')' to close the '(' at column 1, got the end of the query"),
        ("//a:b = //c", 7, "unexpected '=' after a complete expression"),
        ("//a + 'b", 7, "unclosed quotation"),
        ("//a:b&c", 6, "unexpected character '&'"),
        ("*//a", 1, "unexpected character '*'"),
        ("let 1 = //a in $1", 5, "expected a variable name after 'let', got '1'"),
        ("let v = //a $v", 13, "expected 'in' after the value of 'v', got '$v'"),
        ("let v = //a in $w", 16, "undefined variable '$w'"),
        ("$v", 1, "undefined variable '$v'"),
        ("let v = $v in $v", 9, "undefined variable '$v'"),
        ("set(//a, //b)", 8, "expected ')' to close set(, which takes target patterns separated by spaces, got ','"),
        ("", 1, "expected an expression, got the end of the query"),
    ],
)
def test_syntax_errors_point_at_their_column(expression, column, message):
    with pytest.raises(QueryError) as caught:
        parse(expression)
    assert (caught.value.column, caught.value.reason) == (column, message)


def test_error_message_shows_the_expression_with_a_caret():
    with pytest.raises(QueryError) as caught:
        parse("deps(//a, x)")
    assert str(caught.value) == (
        "deps() expects a non-negative integer here, got 'x' (column 11 of the query)\n"
        "    deps(//a, x)\n"
        "              ^"
    )


def test_unknown_function_suggests_the_closest():
    with pytest.raises(QueryError) as caught:
        parse("rdep(//..., //a)")
    assert caught.value.hint == "did you mean 'rdeps', 'deps'?"


@pytest.mark.parametrize(
    ("words", "expression"),
    [
        (["deps", "//x:y"], 'deps("//x:y")'),
        (["deps", "//x:y", "//x:z"], 'deps("//x:y" + "//x:z")'),
        (["stale", "//..."], 'stale("//...")'),
        (["deps(//x:y)"], "deps(//x:y)"),
        (["deps", "(//x:y)"], "deps (//x:y)"),
        (["//x:y", "+", "//x:z"], "//x:y + //x:z"),
        (["rdeps", "//...", "//x:y"], "rdeps //... //x:y"),  # two arguments: no shorthand
        (["deps"], "deps"),
    ],
)
def test_command_line_shorthand(words, expression):
    assert from_command_line(words) == expression


# -- the command line --------------------------------------------------------------------------

FILES = {
    "p/BUILD.marin": """\
        genrule(name = "a", srcs = ["in.txt"], outs = ["a.txt"], cmd = "cat $< > $@")
        genrule(name = "b", srcs = [":a"], outs = ["b.txt"], cmd = "cat $< > $@")
        """,
    "p/in.txt": "in\n",
}


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return new_workspace(tmp_path_factory.mktemp("cli") / "ws", FILES)


def test_cli_prints_labels_and_accepts_the_shorthand(ws):
    result = run_cli(["query", "deps", "//p:b"], cwd=ws)
    assert (result.rc, result.stdout, result.stderr) == (0, "//p:b\n//p:a\n//p:in.txt\n", "")
    result = run_cli(["query", "--output", "label_kind", "rdeps(//..., :in.txt)"], cwd=ws / "p")
    assert result.stdout == "genrule rule //p:b\ngenrule rule //p:a\nsource file //p:in.txt\n"
    assert store_is_untouched(ws) and not (ws / "cache").exists()


def test_cli_syntax_error_exits_2_and_shows_the_column(ws):
    result = run_cli(["query", "deps(//p:b"], cwd=ws)
    assert result.rc == 2
    assert result.stderr == (
        "marinbuild: error: expected ')' to close deps( (it takes 1 to 2 arguments), "
        "got the end of the query (column 11 of the query)\n"
        "    deps(//p:b\n"
        "              ^\n"
    )


def test_cli_unknown_target_is_an_error_at_its_column(ws):
    result = run_cli(["query", "//p:a + //p:aa"], cwd=ws)
    assert result.rc == 2
    assert error_line(result.stderr) == (
        "marinbuild: error: '//p:aa', which is neither a target of //p nor a file in it (column 9 of the query)"
    )
    assert result.stderr.endswith("\n    //p:a + //p:aa\n            ^\n  hint: did you mean 'a'?\n")


def test_cli_keep_going_skips_unknown_targets_with_a_warning(ws):
    result = run_cli(["query", "--keep-going", "deps(//p:c + //nope:x) + //p:a"], cwd=ws)
    assert (result.rc, result.stdout) == (0, "//p:a\n")
    warnings = [line for line in result.stderr.splitlines() if line.startswith("marinbuild: warning: ")]
    assert warnings == [
        "marinbuild: warning: '//p:c', which is neither a target of //p nor a file in it (column 6 of the query)",
        "marinbuild: warning: '//nope:x': no package '//nope' (column 14 of the query)",
    ]


def test_cli_empty_result_says_so_on_stderr(ws):
    result = run_cli(["query", "//p:a - //p:all"], cwd=ws)
    assert (result.rc, result.stdout, result.stderr) == (0, "", "marinbuild: the query matched no targets\n")


def test_cli_rejects_an_unknown_output_format(ws):
    result = run_cli(["query", "--output", "xml", "//p:a"], cwd=ws)
    assert result.rc == 2
    assert "Invalid value for '--output'" in result.stderr
