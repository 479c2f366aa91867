"""Hugging Face Hub snapshots pinned to a commit, for the rules that read from the Hub.

A branch or tag can move while the action key (which holds only the revision string)
stays the same, so the cache would serve the outputs of an older snapshot: rules refuse
a revision that is not a commit hash unless the user opts in with `allow_unpinned`.
Downloads go through `huggingface_hub`, so its settings apply unchanged: `HF_HUB_CACHE`
(or `HF_HOME`) says where snapshots live, and `HF_HUB_OFFLINE=1` reads only from there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.context import StepFailed

COMMIT = re.compile(r"[0-9a-f]{40}")

# What huggingface_hub and datasets read from the environment: where snapshots live,
# offline mode, the endpoint and a token (recorded in attempts without its value). Rules
# that read the Hub pass them to their steps, whose environment is otherwise clean.
HUB_ENV = (
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_DATASETS_CACHE",
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_ENDPOINT",
    "HF_TOKEN",
)

# The environment of every step that imports transformers: none uses PyTorch (Levanter
# computes with JAX and reads safetensors), and where torch is installed transformers would
# import it anyway, which costs such a step about 4.5 s of CPU time before it starts.
NO_TORCH = "USE_TORCH=0"

ALLOW_UNPINNED = Attr(
    types.BOOL,
    default=False,
    doc="Accept a branch or tag as revision (the cache may then serve an older snapshot).",
)


def check_pinned(attrs: Mapping[str, JsonValue], field: str = "revision") -> None:
    """Refuse a moving revision at load time (a ValueError names the BUILD line)."""
    revision = attrs[field]
    if revision is None or attrs["allow_unpinned"] or COMMIT.fullmatch(revision):
        return
    raise ValueError(
        f"{field} {revision!r} is not a commit hash: a branch or tag can move while the "
        "cache keeps serving the old snapshot; pin the 40-hex commit id (the Hub's "
        "'History' of the repository lists them) or set allow_unpinned = True"
    )


def snapshot(repo: str, revision: str, repo_type: str, allow_patterns: list[str] | None = None) -> Path:
    """The local directory of `repo` at `revision`, downloaded into the Hub cache if needed."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        path = snapshot_download(repo_id=repo, repo_type=repo_type, revision=revision, allow_patterns=allow_patterns)
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as error:
        raise StepFailed(
            f"cannot get {repo_type} {repo!r} at revision {revision!r}: {error}\n"
            "(snapshots are read from HF_HUB_CACHE; with HF_HUB_OFFLINE=1 nothing is downloaded)"
        ) from None
    return Path(path)


def resolved_commit(snapshot_dir: Path) -> str:
    """The commit a snapshot directory holds (the Hub cache names snapshots by commit)."""
    return snapshot_dir.name
