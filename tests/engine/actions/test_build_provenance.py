"""What a build records of where it ran (actions/bookkeeping/build_provenance.py): the workspace's git
commit and dirty state from one `git status`, and the platform without a `uname` process.

Every repository here is a real one made with git; each state is checked against what git
itself says (`git rev-parse HEAD`), so the parse of `git status --porcelain=v2` cannot drift
from git unnoticed.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from marinbuild.actions.bookkeeping.build_provenance import Provenance

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def committed_repo(root: Path, files: dict[str, str]) -> Path:
    """A repository at `root` with `files` committed."""
    root.mkdir(parents=True)
    git(root, "init", "-q")
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    git(root, "add", ".")
    git(root, "commit", "-qm", "first")
    return root


def recorded(workspace: Path) -> dict:
    found = Provenance(workspace.resolve()).invocation
    return {name: found[name] for name in ("git_commit", "git_dirty") if name in found}


def test_outside_a_repository_no_commit_is_recorded(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    assert recorded(workspace) == {"git_commit": None}


def test_a_repository_without_commits_records_none(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    git(workspace, "init", "-q")
    (workspace / "BUILD.marin").write_text("")
    assert recorded(workspace) == {"git_commit": None}


def test_clean_workspace_records_the_commit_and_marinbuild_state_does_not_count(tmp_path):
    repo = committed_repo(tmp_path / "repo", {"ws/marinbuild.toml": "", "ws/BUILD.marin": "", "README": "r\n"})
    workspace = repo / "ws"
    (workspace / ".marinbuild").mkdir()
    (workspace / ".marinbuild" / "stat-cache.pickle").write_bytes(b"x")
    (workspace / "cache").mkdir()
    (workspace / "cache" / "store.json").write_text("{}")  # a store inside the workspace
    (repo / "notes.txt").write_text("untracked, but outside the workspace\n")
    assert recorded(workspace) == {"git_commit": git(repo, "rev-parse", "HEAD"), "git_dirty": False}


@pytest.mark.parametrize(
    "change",
    [
        "untracked file in the workspace",
        "untracked directory in the workspace",
        "tracked file edited outside the workspace",
        "new file staged",
        "tracked file renamed",
        "tracked file deleted",
    ],
)
def test_each_kind_of_change_makes_the_build_dirty(tmp_path, change):
    repo = committed_repo(tmp_path / "repo", {"ws/marinbuild.toml": "", "ws/p/BUILD.marin": "", "README": "r\n"})
    workspace = repo / "ws"
    if change == "untracked file in the workspace":
        (workspace / "p" / "script.py").write_text("print(1)\n")
    elif change == "untracked directory in the workspace":
        (workspace / "new" / "deep").mkdir(parents=True)
        (workspace / "new" / "deep" / "BUILD.marin").write_text("")
    elif change == "tracked file edited outside the workspace":
        (repo / "README").write_text("edited\n")
    elif change == "new file staged":
        (repo / "staged.txt").write_text("s\n")
        git(repo, "add", "staged.txt")
    elif change == "tracked file renamed":
        git(repo, "mv", "README", "README.md")
    else:
        git(repo, "rm", "-q", "README")
    assert recorded(workspace) == {"git_commit": git(repo, "rev-parse", "HEAD"), "git_dirty": True}


def test_workspace_at_the_top_of_a_linked_work_tree(tmp_path):
    """A linked work tree has a `.git` file, not a directory; paths with a space and a
    non-ASCII name come through `-z` unquoted."""
    repo = committed_repo(tmp_path / "repo", {"marinbuild.toml": "", "BUILD.marin": ""})
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", str(linked))
    assert (linked / ".git").is_file()
    commit = git(repo, "rev-parse", "HEAD")
    assert recorded(linked) == {"git_commit": commit, "git_dirty": False}
    (linked / "a file ü.txt").write_text("x\n")
    assert recorded(linked) == {"git_commit": commit, "git_dirty": True}


def test_git_directory_named_by_the_environment(tmp_path, monkeypatch):
    repo = committed_repo(tmp_path / "repo", {"marinbuild.toml": "", "BUILD.marin": ""})
    commit = git(repo, "rev-parse", "HEAD")
    (repo / ".git").rename(tmp_path / "elsewhere.git")  # no .git above the workspace now
    assert recorded(repo) == {"git_commit": None}
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere.git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(repo))
    assert recorded(repo) == {"git_commit": commit, "git_dirty": False}


@pytest.mark.skipif(sys.platform != "linux", reason="elsewhere the platform is platform.platform()'s own answer")
def test_platform_is_what_platform_platform_says():
    assert Provenance(Path.cwd()).invocation["platform"] == platform.platform()
