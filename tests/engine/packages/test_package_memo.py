"""The package memo (packages/package_cache.py): a no-op build reuses every loaded package,
with its targets' attributes and identity templates, and a change to anything loading
read or ran evaluates again exactly what it must — never serves a stale recipe.

Loading reads BUILD and .star files, lists directories for glob(), and runs rule code (a
rule's `validate`, its attribute schema, `omit_default`): each kind of change is made
here, and the build must rebuild exactly the targets whose recipe changed. Which BUILD
files a build read comes from Python's audit hooks (tests/helpers_audit.py): one read is
one package evaluated again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers_audit import Traced, backdate, bytecode_env, run_traced, run_untraced
from helpers_memo import MEMO_CONFIG, MEMO_FILES


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    (tmp_path / "input-1.txt").write_text("one\n")
    return {**bytecode_env(), "MEMO_TEST_INPUT": str(tmp_path / "input-1.txt")}


@pytest.fixture
def ws(make_workspace, env) -> Path:
    """Built, backdated (every digest trusted from the next build on) and built again."""
    root = make_workspace(MEMO_FILES, config=MEMO_CONFIG)
    run_untraced(root, "build", "//...", env=env)
    backdate(root)
    run_untraced(root, "build", "//...", env=env)
    return root


def build(ws: Path, env: dict[str, str], expect_rc: int = 0) -> tuple[dict[str, str], list[str], Traced]:
    """({label: status}, the BUILD and .star files opened, the events) of `build //...`.

    A file is opened to be evaluated, and before that to be hashed if it changed."""
    traced = run_traced(ws, "build", "--json", "//...", env=env)
    assert traced.rc == expect_rc, traced.stderr
    statuses = (
        {item["label"]: item["status"] for item in json.loads(traced.stdout)["targets"]} if expect_rc == 0 else {}
    )
    root = str(ws.resolve()) + "/"
    read = sorted(
        {
            path.removeprefix(root)
            for path in traced.paths("read")
            if path.startswith(root) and path.endswith(("BUILD.marin", ".star"))
        }
    )
    return statuses, read, traced


def built(statuses: dict[str, str]) -> set[str]:
    return {label for label, status in statuses.items() if status == "built"}


def test_an_untouched_workspace_hits_the_memo(ws, env):
    statuses, read, _ = build(ws, env)
    assert set(statuses.values()) == {"cached"} and len(statuses) == 5
    assert read == []  # every package from the memo: no BUILD or .star file evaluated


def test_an_edited_rule_helper_is_evaluated_again(ws, env):
    """The helper a rule's `validate` calls lives in another module of the rule's package:
    an edit there must reach every package (with a stale memo, 'hi' would still pass)."""
    (ws / "myrules/checks.py").write_text(
        'def check(attrs):\n    if attrs["text"] == "hi":\n        raise ValueError("text may not be \'hi\'")\n'
    )
    traced = run_traced(ws, "build", "//...", env=env)
    assert traced.rc == 2
    assert "p/BUILD.marin:2: write_text 'hello': text may not be 'hi'" in traced.stderr


def test_an_edited_rule_module_gives_the_recipe_it_now_declares(ws, env):
    """`omit_default` decides whether an attribute is in the key, through the identity
    template kept in the memo: flipped in the rule module, hello's key changes (its output
    does not, so what reads it stays cached: early cutoff)."""
    before = keys(ws, env)
    (ws / "myrules/defs.py").write_text(
        (ws / "myrules/defs.py").read_text().replace('default="", omit_default=True', 'default=""')
    )
    statuses, read, _ = build(ws, env)
    assert read == ["lib/BUILD.marin", "lib/macros.star", "p/BUILD.marin", "q/BUILD.marin"]  # every package
    assert built(statuses) == {"//p:hello"}
    after = keys(ws, env)
    assert {label for label in before if before[label] != after[label]} == {"//p:hello"}


def test_a_build_file_edit_evaluates_that_package_alone(ws, env):
    (ws / "p/BUILD.marin").write_text((ws / "p/BUILD.marin").read_text().replace('text = "hi"', 'text = "ho"'))
    statuses, read, _ = build(ws, env)
    assert read == ["lib/macros.star", "p/BUILD.marin"]  # the .star file it loads, with it
    # n counts hello's new bytes, and counts as many: q, which reads n, stays cached.
    assert built(statuses) == {"//p:hello", "//p:n"}


def test_a_loaded_star_file_edit_evaluates_the_packages_loading_it(ws, env):
    (ws / "lib/macros.star").write_text((ws / "lib/macros.star").read_text().replace("wc -c", "wc -l"))
    statuses, read, _ = build(ws, env)
    assert read == ["lib/macros.star", "p/BUILD.marin"]
    assert built(statuses) == {"//p:n", "//q:q"}


def test_a_source_edit_rebuilds_its_readers_and_keeps_the_memo(ws, env):
    (ws / "p/a.txt").write_text("edited\n")
    statuses, read, _ = build(ws, env)
    assert read == []  # the glob lists the same files
    assert built(statuses) == {"//p:all"}


def test_a_file_a_glob_now_matches_evaluates_the_package_again(ws, env):
    (ws / "p/b.txt").write_text("b\n")
    statuses, read, _ = build(ws, env)
    assert read == ["lib/macros.star", "p/BUILD.marin"]
    assert built(statuses) == {"//p:all"}


def test_an_input_named_by_the_environment_is_read_at_each_build(ws, env, tmp_path):
    """What a key holds beyond the BUILD file and rule code — here an external input the
    environment names — is never taken from the memo: another file with other bytes
    rebuilds the target; another file with the same bytes does not."""
    (tmp_path / "input-2.txt").write_text("two\n")
    statuses, read, _ = build(ws, {**env, "MEMO_TEST_INPUT": str(tmp_path / "input-2.txt")})
    assert read == [] and built(statuses) == {"//q:env"}
    (tmp_path / "input-3.txt").write_text("two\n")
    statuses, _, _ = build(ws, {**env, "MEMO_TEST_INPUT": str(tmp_path / "input-3.txt")})
    assert built(statuses) == set()


def keys(ws: Path, env: dict[str, str]) -> dict[str, str]:
    traced = run_traced(ws, "build", "--dry-run", "--json", "//...", env=env)
    assert traced.rc == 0, traced.stderr
    return {item["label"]: item["key"] for item in json.loads(traced.stdout)["targets"]}
