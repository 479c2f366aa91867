"""Helpers for the label, loading and bad-input tests (imported explicitly, as other helpers are).

Workspaces are made under a test's tmp_path from a dict of files; the CLI runs in a
subprocess exactly as a user would run it; the Python API is used where a subprocess
would only make the suite slower.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from conftest import CLI_TIMEOUT_S, cli_env, write_files

from marinbuild.actions.analysis.graph import Graph
from marinbuild.packages import PackageLoader, open_workspace
from marinbuild.packages.rule_modules import workspace_rules
from marinbuild.session import Session

STORE_DIR = "cache"  # the default store, relative to the workspace root


def new_workspace(root: Path, files: Mapping[str, str] = {}, config: str = "") -> Path:  # noqa: B006
    """Create a workspace at `root`: a marinbuild.toml holding `config`, plus `files` (dedented)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "marinbuild.toml").write_text(textwrap.dedent(config))
    write_files(root, files)
    return root


def loader_for(ws: Path) -> PackageLoader:
    workspace = open_workspace(ws)
    return PackageLoader(workspace, workspace_rules(workspace))


def plan(ws: Path, *patterns: str, cwd: Path | None = None) -> Graph:
    return Session.open(ws, cwd=cwd or ws).plan(list(patterns))


def requested(ws: Path, *patterns: str, cwd: Path | None = None) -> list[str]:
    return plan(ws, *patterns, cwd=cwd).requested


@dataclass
class CliResult:
    rc: int
    stdout: str
    stderr: str


def run_cli(args: Sequence[str], *, cwd: Path, workspace: Path | None = None) -> CliResult:
    """`python -m marinbuild [--workspace WS] ARGS` in `cwd`."""
    command = [sys.executable, "-m", "marinbuild"]
    if workspace is not None:
        command += ["--workspace", str(workspace)]
    command += list(args)
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=cli_env())
    return CliResult(done.returncode, done.stdout, done.stderr)


def build(ws: Path, *args: str, cwd: Path | None = None) -> CliResult:
    """`marinbuild --workspace WS build ARGS`, run from `cwd` (default: the workspace's parent)."""
    return run_cli(["build", *args], cwd=cwd or ws.parent, workspace=ws)


def store_is_untouched(ws: Path) -> bool:
    store = ws / STORE_DIR
    return not store.exists() or not any(store.iterdir())


def error_line(stderr: str) -> str:
    """The `marinbuild: error: ...` line of a failed command's stderr."""
    lines = [line for line in stderr.splitlines() if line.startswith("marinbuild: error: ")]
    assert len(lines) == 1, f"expected exactly one error line, stderr was:\n{stderr}"
    return lines[0]


def assert_located(text: str, file: str, line: int, message: str) -> None:
    """`text` is `[marinbuild: error: ]FILE:LINE[:COL]: MESSAGE...` with exactly this file and line."""
    text = text.removeprefix("marinbuild: error: ")
    pattern = rf"{re.escape(file)}:{line}(:\d+)?: {re.escape(message)}"
    assert re.match(pattern, text), f"expected '{file}:{line}: {message}...', got:\n{text}"


def assert_bad_input(result: CliResult, ws: Path, file: str, line: int, message: str) -> None:
    """Exit status 2, one `marinbuild: error: FILE:LINE: MESSAGE` line, nothing in the store."""
    assert result.rc == 2, f"exit {result.rc}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert_located(error_line(result.stderr), file, line, message)
    assert "Traceback" not in result.stderr, result.stderr
    assert store_is_untouched(ws), sorted(p.name for p in (ws / STORE_DIR).iterdir())


def assert_bad_declarations(make_workspace, cases: Sequence[tuple[str, str]], config: str = "") -> None:
    """For each `(declaration, message)`: a package of a filegroup `:d` and, on line 3, the
    declaration of a target `m`; building it is bad input `RULE 'm': MESSAGE` at that line."""
    for declared, message in cases:
        ws = make_workspace({"m/BUILD.marin": f'filegroup(name = "d")\n# the target\n{declared}\n'}, config=config)
        rule = declared.partition("(")[0]
        assert_bad_input(build(ws, "//m:m"), ws, "m/BUILD.marin", 3, f"{rule} 'm': {message}")
