"""Who, where and with what a build ran: recorded in its invocation record and in every
attempt it makes (user, host, versions, the workspace's git state)."""

from __future__ import annotations

import getpass
import os
import platform
import socket
import subprocess
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
            "platform": platform.platform(),
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
        def git(*args: str) -> str | None:
            try:
                done = subprocess.run(
                    ["git", *args], cwd=self.workspace, capture_output=True, text=True, timeout=10, check=True
                )
            except (OSError, subprocess.SubprocessError):
                return None
            return done.stdout.strip()

        commit = git("rev-parse", "HEAD")
        if commit is None:
            return {"git_commit": None}
        changed = bool(git("status", "--porcelain", "--untracked-files=no"))
        # A file git does not track (a new BUILD file, a py_step's script) is not in the
        # commit either: the build is not reproducible from it.
        untracked = git("ls-files", "--others", "--exclude-standard", "--directory", "--no-empty-directory", "--", ".")
        return {"git_commit": commit, "git_dirty": changed or bool(_untracked(self.workspace, untracked or ""))}


def _untracked(workspace: Path, listing: str) -> list[str]:
    """The workspace's untracked files and directories (git lists a directory once), less
    marinbuild's own: its machine state and a store kept in the workspace, ignored or not."""
    found = []
    for line in listing.splitlines():
        path = workspace / line.rstrip("/")
        if line.startswith(".marinbuild/") or (path / "store.json").is_file():
            continue
        found.append(line)
    return found
