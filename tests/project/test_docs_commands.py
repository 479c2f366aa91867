"""The README's commands on a fresh machine: every `marinbuild` command line shown in
README.md and docs/ parses with the real CLI, the README's "Command line" section runs,
offline, on experiments/hello, and a test needing a system tool the machine lacks skips
(or fails where .ci/run installed the tools).

What counts as a command line (found in each Markdown file under docs/ and README.md):

- in a fenced block of shell (no language, bash, sh, shell, console, text), every simple
  command of a line (split at `&&`, `||`, `;` and `|`, a `$ ` prompt and `# comments`
  dropped, a redirection and what follows it too) whose program is `marinbuild` or
  `.../marinbuild`; a line ending in `\\` continues on the next one;
- in prose, every inline code span that starts with `marinbuild `.

Usage synopses (a token in `[...]`, or an upper-case placeholder such as `LABEL`,
`PATTERN...`, `LABEL|KEY`) are checked too, made concrete: every optional part is
included, each placeholder becomes a sample value (PLACEHOLDERS), and each alternative
of `a|b|c` is tried in turn, so a synopsis naming an option that does not exist fails.
A synopsis continues on the indented lines below it that start with `[`.

Left out, on purpose:
- Python and TOML blocks (`marinbuild.output(...)` is the Python API; docs/store.md's
  `# or: marinbuild --store ... ...` is a TOML comment pointing at the option);
- lines whose first word is `marinbuild:` — the program's output (`marinbuild: error: ...`);
- an inline span naming a command without its required arguments (`marinbuild query`,
  `marinbuild build --dry-run`) is checked for its command and options only.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from conftest import CLI_TIMEOUT_S, REQUIRE_TOOLS, cli_env, parse_command_line, require_tool
from helpers_docs import (
    DOC_COMMANDS,
    DOCS,
    ROOT,
    DocCommand,
)

from marinbuild.cli.main import COMMANDS


def test_the_docs_show_command_lines() -> None:
    """The extraction finds what it should: a guard against a rule that silently matches nothing."""
    files = {command.file for command in DOC_COMMANDS}
    assert {"README.md", "docs/cluster.md", "docs/query.md", "docs/reproducibility.md", "docs/tutorial.md"} <= files
    assert ("build", "--executor", "ray", "--ray-address", "HEAD_IP:6379", "--store", "gs://team-bucket/mb") == next(
        command.args[:7] for command in DOC_COMMANDS if command.file == "docs/cluster.md"
    )
    # The README's commands are those the run below covers, the report's (test_report.py),
    # compare's, which needs training runs (test_compare.py), and pin's, which needs an
    # external artifact (test_external_artifacts.py).
    readme = {command.args[0] for command in DOC_COMMANDS if command.file == "README.md"} & set(COMMANDS)
    assert readme == {*README_COMMANDS, "report", "serve", "compare", "pin"}, readme
    assert len(DOC_COMMANDS) > 60


@pytest.mark.parametrize("command", DOC_COMMANDS, ids=[f"{c.file}:{c.line}:{' '.join(c.args)}" for c in DOC_COMMANDS])
def test_every_command_line_of_the_docs_parses(command: DocCommand) -> None:
    try:
        parse_command_line(command.args)
    except click.MissingParameter as missing:
        # An inline span may name a command without its arguments: `marinbuild query`.
        if not (command.inline and isinstance(missing.param, click.Argument)):
            pytest.fail(f"{command}\n  as: marinbuild {shlex.join(command.args)}\n  {missing.format_message()}")
    except click.UsageError as error:
        pytest.fail(f"{command}\n  as: marinbuild {shlex.join(command.args)}\n  {error.format_message()}")


# -- the README's "Command line" section, run --------------------------------------------------

# The commands of the section this test runs: every one that works offline and fast, with
# the shared options after the command. Each is tested in depth elsewhere: build and where
# in test_cli.py, query in test_query_language.py and test_query_store.py, explain in
# test_explain.py, show, rerun, log and history in test_show_rerun.py and
# test_attempts_history.py, cache in test_cache_commands.py; report and serve (which the
# section also shows) in test_report.py.
README_COMMANDS = ("build", "where", "query", "explain", "show", "rerun", "log", "history")
HELLO = "//experiments/hello"


def test_the_readme_commands_run_with_options_after_the_command(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(ROOT / "experiments/hello", ws / "experiments/hello", ignore=shutil.ignore_patterns("__pycache__"))
    (ws / "marinbuild.toml").write_text("")
    store = tmp_path / "store"
    shared = ["--store", str(store), "--workspace", str(ws)]

    def marinbuild(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "marinbuild", *args, *shared],
            cwd=tmp_path,  # outside the workspace: --workspace after the command finds it
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            env=cli_env(),
        )
        assert done.returncode == 0, f"marinbuild {shlex.join(args)}: exit {done.returncode}\n{done.stderr}"
        return done.stdout

    built = marinbuild(f"{HELLO}:all")  # same as: marinbuild build ...
    assert [line.split(": ")[0] for line in built.splitlines() if line.startswith("//")] == [
        f"{HELLO}:{name}" for name in ("greeting", "words", "count", "report")
    ]
    cached = json.loads(marinbuild("build", f"{HELLO}:all", "--jobs", "2", "--keep-going", "--json"))
    assert cached["counts"]["cached"] == 4 and all(
        Path(item["output"]).is_relative_to(store) for item in cached["targets"]
    )
    key = next(item["key"] for item in cached["targets"] if item["label"] == f"{HELLO}:report")
    assert marinbuild("build", f"{HELLO}:all", "--dry-run").split()[0] == "cached"

    assert Path(marinbuild("where", f"{HELLO}:report").strip()).is_relative_to(store)
    rdeps = marinbuild("query", f"rdeps({HELLO}:all, {HELLO}:words)", "--output", "label").split()
    assert sorted(rdeps) == [f"{HELLO}:count", f"{HELLO}:report", f"{HELLO}:words"]
    assert json.loads(marinbuild("explain", f"{HELLO}:report", "--json"))["key"] == key
    assert json.loads(marinbuild("show", key[:12], "--recursive", "--json"))["key"] == key
    assert "matches the stored output" in marinbuild("rerun", key[:12], "--check")
    attempts = marinbuild("log", f"{HELLO}:report", "--list").splitlines()
    assert len(attempts) == 2 and "aside: rerun --check" in attempts[1]  # the build's, then the check's
    marinbuild("log", f"{HELLO}:report", "--attempt", "1")
    history = json.loads(marinbuild("history", f"{HELLO}/...", "--json"))
    assert len(history) == 1, history

    # The store's upkeep (docs/store.md), its options after the nested command too.
    assert marinbuild("cache", "verify").strip().endswith(": 0 mismatches")
    assert " 4 entries" in marinbuild("cache", "stats")
    collected = marinbuild("cache", "gc", "--dry-run", "--grace", "0s").splitlines()
    assert any(line.startswith("would remove 0 keys") for line in collected), collected


# -- system tools: a skip on a fresh machine, an error in CI --------------------------------------


def test_a_missing_tool_skips_saying_what_it_is_for(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv(REQUIRE_TOOLS, raising=False)
    with pytest.raises(pytest.skip.Exception, match="^chromium is not installed: to look at the report$"):
        require_tool("chromium", "to look at the report")


def test_a_missing_tool_fails_where_the_tools_are_required(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "")
    monkeypatch.setenv(REQUIRE_TOOLS, "1")
    with pytest.raises(pytest.fail.Exception, match=f"^chromium is not installed: .*{REQUIRE_TOOLS}=1"):
        require_tool("chromium", "to look at the report")


def test_a_tool_on_the_path_is_found(monkeypatch) -> None:
    monkeypatch.setenv(REQUIRE_TOOLS, "1")
    assert require_tool("sh", "a shell") == shutil.which("sh")


def test_ci_installs_every_tool_a_test_requires_and_makes_its_absence_an_error() -> None:
    ci = (ROOT / ".ci/run").read_text()
    required = {
        match.group(1)
        for path in (ROOT / "tests").rglob("*.py")
        for match in re.finditer(r'require_tool\(\s*"([^"]+)"', path.read_text())
    }
    assert {"chromium", "chromedriver", "dot", "bazel", "tc"} <= required, required
    checked = set(re.findall(r"command -v (\S+)", ci))
    assert required - {"sh"} <= checked, f".ci/run neither checks nor installs {required - checked}"
    assert re.search(r"apt-get install -y -q chromium chromium-driver graphviz bazel-bootstrap iproute2\n", ci)
    export = ci.index(f"export {REQUIRE_TOOLS}=1")
    assert export < ci.index(".venv/bin/python -m pytest"), "set before the test suite runs"


def test_every_test_the_docs_name_exists() -> None:
    """docs/guarantees.md and the others prove each promise by naming its test
    (`test_file.py::test_name`): a test renamed or removed must not leave a promise whose
    proof is gone."""
    named = [
        (doc.relative_to(ROOT), file, name)
        for doc in DOCS
        for file, name in re.findall(r"\b(test_\w+\.py)::(test_\w+)", doc.read_text())
    ]
    assert len(named) > 50, "the docs name their tests"
    missing = [
        f"{doc}: {file}::{name}"
        for doc, file, name in named
        if not re.search(rf"^def {name}\(", _source(file), re.MULTILINE)
    ]
    assert not missing, missing


def _source(file: str) -> str:
    """The text of the test file of that name, wherever under tests/ it lives (names are
    unique there: pytest imports them by name)."""
    found = list((ROOT / "tests").rglob(file))
    return found[0].read_text() if len(found) == 1 else ""
