"""Where a resumable step would resume: what its key's scratch space holds.

A resumable rule (train_lm) keeps its checkpoints in a stable scratch space per key,
which survives an interrupted build; the next attempt at the key continues from them.
The rule says what its files amount to (`Rule.resume_point`), reading those it needs;
this module finds the files a new attempt would start from, without writing anything,
so that `build`, `build --dry-run` and `explain` can tell the user before the step runs.
"""

from __future__ import annotations

from pathlib import Path

from marinbuild.store import Store, layout
from marinbuild.targets.rule import ReadScratch, Rule


def scratch_files(store: Store, key: str) -> tuple[list[str], ReadScratch]:
    """The files of `key`'s scratch space a new attempt would find, relative to it, and how
    to read one: this machine's (a local store's scratch lies in the store), else, on a
    remote store, the copy mirrored to `scratch/<kk>/<key>/`, which an attempt here
    restores first."""
    local = store.local_path(layout.scratch(key))
    files = (
        sorted(path.relative_to(local).as_posix() for path in local.rglob("*") if path.is_file())
        if local.is_dir()
        else []
    )
    if files or store.scratch_is_shared:
        return files, lambda name: _local_bytes(local / name)
    prefix = layout.scratch(key)
    return sorted(store.stat_tree(prefix)), lambda name: store.read_bytes(f"{prefix}/{name}")


def _local_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def resume_point(store: Store, rule: Rule, key: str) -> str | None:
    """Where an attempt at `key` would resume ("the checkpoint at step 10"), or None."""
    if not rule.resumable or rule.resume_point is None:
        return None
    files, read = scratch_files(store, key)
    return rule.resume_point(files, read) if files else None
