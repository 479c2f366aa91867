"""Who, where and with what a build ran: recorded in its invocation record and in every
attempt it makes (user, host, versions, the workspace's git state)."""

from __future__ import annotations

import getpass
import os
import platform
import socket
import subprocess
import sys
from functools import cached_property
from pathlib import Path
from typing import Any

from marinbuild.store import new_attempt_id
from marinbuild.version import __version__


class Provenance:
    """Who, where and with what a step was built; computed once per invocation, which
    `invocation_id` names in the invocation record and in every attempt it made."""

    def __init__(self, workspace: Path):
        self.workspace = workspace
        self.invocation_id = new_attempt_id()
        self._versions: dict[str, str | None] = {}

    @cached_property
    def invocation(self) -> dict[str, Any]:
        return {
            "user": getpass.getuser(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "marinbuild": __version__,
            "python": platform.python_version(),
            "platform": _platform(),
            **self._git(),
        }

    def packages(self, names: tuple[str, ...]) -> dict[str, str | None]:
        """Installed versions of the distributions a rule declares (None if absent)."""
        import importlib.metadata  # 30 ms to import, and only needed when a step runs

        versions: dict[str, str | None] = {}
        for name in names:
            if name not in self._versions:
                try:
                    self._versions[name] = importlib.metadata.version(name)
                except importlib.metadata.PackageNotFoundError:
                    self._versions[name] = None
            versions[name] = self._versions[name]
        return versions

    def _git(self) -> dict[str, Any]:
        """The workspace's commit and whether the build differs from it: one `git status`
        (its porcelain v2 header names the commit), and no process at all outside a git
        work tree. Tracked files count anywhere in the repository, untracked ones inside
        the workspace: a file git does not track (a new BUILD file, a py_step's script) is
        not in the commit either, so the build is not reproducible from it."""
        top = _work_tree(self.workspace)
        if top is None:
            return {"git_commit": None}
        # No optional locks: a build never takes the index lock from under the user's git;
        # untracked files listed whatever status.showUntrackedFiles says.
        status = _run_git(
            self.workspace,
            "--no-optional-locks",
            "status",
            "--porcelain=v2",
            "--branch",
            "-z",
            "--untracked-files=normal",
        )
        if status is None:
            return {"git_commit": None}
        commit, changed, untracked = _parse_status(status)
        if commit is None:
            return {"git_commit": None}
        try:
            prefix = self.workspace.relative_to(top).as_posix()
        except ValueError:  # a work tree named elsewhere (GIT_WORK_TREE) not holding the workspace
            return {"git_commit": commit, "git_dirty": changed}
        prefix = "" if prefix == "." else prefix + "/"
        inside = [path[len(prefix) :] for path in untracked if path.startswith(prefix)]
        return {"git_commit": commit, "git_dirty": changed or bool(_untracked(self.workspace, inside))}


def _platform() -> str:
    """`platform.platform()` as Linux gives it (`Linux-6.8.0-x86_64-with-glibc2.35`), made
    from `os.uname()`: `platform.platform()` starts a `uname -p` process for the processor,
    a field it leaves out on Linux, where it is the machine again or "unknown". Elsewhere,
    its own answer."""
    if sys.platform != "linux":
        return platform.platform()
    uname = os.uname()
    libc, version = platform.libc_ver()
    return "-".join(part for part in (uname.sysname, uname.release, uname.machine, "with", libc + version) if part)


def _run_git(workspace: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=workspace, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


def _work_tree(workspace: Path) -> Path | None:
    """The top of the git work tree holding `workspace`, found as git finds it: the nearest
    directory upwards with a `.git` (a directory, or a file in a linked work tree). Where
    the environment names git's directories (GIT_DIR, GIT_WORK_TREE), git is asked."""
    if "GIT_DIR" in os.environ or "GIT_WORK_TREE" in os.environ:
        top = _run_git(workspace, "rev-parse", "--show-toplevel")
        return None if not top else Path(top.strip()).resolve()
    for directory in (workspace, *workspace.parents):
        if os.path.lexists(directory / ".git"):
            return directory
    return None


def _parse_status(output: str) -> tuple[str | None, bool, list[str]]:
    """(the commit, whether tracked files changed, the untracked paths) of `git status
    --porcelain=v2 --branch -z`: NUL-terminated fields, paths relative to the top of the work
    tree, an untracked directory listed once (`dir/`)."""
    commit, changed, untracked = None, False, []
    fields = iter(output.split("\0"))
    for field in fields:
        if field.startswith("# branch.oid "):
            oid = field.removeprefix("# branch.oid ")
            commit = None if oid == "(initial)" else oid
        elif field.startswith(("1 ", "u ")):
            changed = True
        elif field.startswith("2 "):  # renamed or copied: the path it came from follows
            changed = True
            next(fields, None)
        elif field.startswith("? "):
            untracked.append(field[2:])
    return commit, changed, untracked


def _untracked(workspace: Path, paths: list[str]) -> list[str]:
    """The workspace's untracked files and directories (git lists a directory once), less
    marinbuild's own: its machine state and a store kept in the workspace, ignored or not."""
    found = []
    for line in paths:
        path = workspace / line.rstrip("/")
        if line.startswith(".marinbuild/") or (path / "store.json").is_file():
            continue
        found.append(line)
    return found
