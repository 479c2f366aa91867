"""The store functions of `marinbuild query`: cached, stale, pending, failed.

They answer what the next build would do, from the scheduler's dry run and the store's
attempt records, and never write to the store (nor create it).
"""

from __future__ import annotations

import textwrap

import pytest
from conftest import store_files
from helpers_workspace import new_workspace

from marinbuild.actions.bookkeeping.results import NullReporter
from marinbuild.actions.execution.build_options import BuildOptions
from marinbuild.commands.build import build as build_targets
from marinbuild.commands.query import query
from marinbuild.session import Session

BUILD = """\
    genrule(name = "a", srcs = ["in.txt"], outs = ["a.txt"], cmd = "cat $< > $@")
    genrule(name = "b", srcs = [":a"], outs = ["b.txt"], cmd = "cat $< > $@")
    genrule(name = "c", srcs = [":b"], outs = ["c.txt"], cmd = "cat $< > $@")
    genrule(name = "broken", srcs = [":a"], outs = ["x.txt"], cmd = {broken_cmd!r})
    genrule(name = "after_broken", srcs = [":broken"], outs = ["y.txt"], cmd = "cat $< > $@")
    """


def store_state(ws) -> dict[str, list[str]]:
    session = Session.open(ws, cwd=ws)
    return {name: list(query(session, f"{name}(//...)").labels) for name in ("cached", "stale", "pending", "failed")}


def build(ws, *patterns: str) -> None:
    build_targets(Session.open(ws, cwd=ws), list(patterns), BuildOptions(jobs=2, keep_going=True), NullReporter())


@pytest.fixture
def ws(tmp_path):
    return new_workspace(tmp_path / "ws", {"p/BUILD.marin": BUILD.format(broken_cmd="exit 3"), "p/in.txt": "in\n"})


def test_nothing_built_yet_and_no_store(ws):
    assert store_state(ws) == {
        "cached": [],
        "stale": ["//p:a"],
        "pending": ["//p:c", "//p:b", "//p:after_broken", "//p:broken"],
        "failed": [],
    }
    assert not (ws / "cache").exists()


def test_after_a_partial_build(ws):
    build(ws, "//p:b")
    assert store_state(ws) == {
        "cached": ["//p:b", "//p:a"],
        "stale": ["//p:c", "//p:broken"],
        "pending": ["//p:after_broken"],
        "failed": [],
    }


def test_a_failed_step_is_failed_until_its_recipe_changes(ws):
    build(ws, "//...")
    before = store_files(ws / "cache")
    assert store_state(ws) == {
        "cached": ["//p:c", "//p:b", "//p:a"],
        "stale": ["//p:broken"],
        "pending": ["//p:after_broken"],
        "failed": ["//p:broken"],
    }
    assert store_files(ws / "cache") == before  # queries read the store, never write it
    (ws / "p/BUILD.marin").write_text(textwrap.dedent(BUILD.format(broken_cmd="echo fixed > $@")))
    assert store_state(ws)["failed"] == []  # a new key, never attempted
    build(ws, "//p:broken")
    assert store_state(ws) == {
        "cached": ["//p:c", "//p:broken", "//p:b", "//p:a"],
        "stale": ["//p:after_broken"],
        "pending": [],
        "failed": [],
    }


def test_store_functions_compose_and_ignore_source_files(ws):
    build(ws, "//p:a")
    session = Session.open(ws, cwd=ws)
    assert list(query(session, "cached(deps(//p:c))").labels) == ["//p:a"]
    assert list(query(session, "deps(//p:c) - cached(//...)").labels) == ["//p:in.txt", "//p:c", "//p:b"]
    assert list(query(session, "kind(rule, deps(//p:c)) - cached(//...)").labels) == ["//p:c", "//p:b"]
    assert list(query(session, "stale(//p:in.txt)").labels) == []
    assert list(query(session, "rdeps(//..., stale(//...), 1)").labels) == [
        "//p:c",
        "//p:b",
        "//p:after_broken",
        "//p:broken",
    ]
