"""A Hugging Face Hub cache on disk, so Hub-backed rules are tested without a network.

`huggingface_hub` reads snapshots from `HF_HUB_CACHE` in this layout:
`{models,datasets}--ORG--NAME/snapshots/COMMIT/<files>`, with `refs/BRANCH` holding the
commit a branch points at. Test modules load this file as a plugin
(`pytest_plugins = ["helpers_hub"]`) for the `offline_hub` fixture.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import write_files


@dataclass(frozen=True)
class HubCache:
    root: Path
    commit: str = "0123456789abcdef0123456789abcdef01234567"

    def add(self, repo_type: str, repo: str, files: Mapping[str, str | bytes], branch: str = "main") -> Path:
        """Put `files` into the cache as `repo` at `self.commit`, with `branch` pointing at it."""
        repo_dir = self.root / f"{repo_type}s--{repo.replace('/', '--')}"
        snapshot = repo_dir / "snapshots" / self.commit
        write_files(snapshot, files)
        (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
        (repo_dir / "refs" / branch).write_text(self.commit)
        return snapshot


@pytest.fixture
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HubCache:
    """An empty Hub cache; the environment (inherited by the CLI) reads only from it."""
    cache = HubCache(tmp_path / "hub")
    cache.root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache.root))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(variable, "1")
    return cache
