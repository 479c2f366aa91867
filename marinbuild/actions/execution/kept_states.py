"""A kept state (`ctx.publish_checkpoint`) is an entry of its own, and lives only there.

Written once, so that a step running on this machine (the scheduler) and one running on a
Ray host (cluster/ray_host.py) publish the same entry the same way: under the state's own
key, derived from the keeper's key and the step, under that key's lease, the first entry
winning (every one holds the same bytes: training here is deterministic). When the step
ends, each state it keeps is its entry — published then from the output if it was not
while the step ran — and `checkpoints/` is left out of the step's own output, so that
the bytes of a kept state are stored once; the keeper's entry names the kept entries
(`kept_keys`), and is a hit only while they are usable (`ActionCache.lookup`).
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from marinbuild.actions.analysis import keys
from marinbuild.store import ActionCache, Attempt, Outputs, new_attempt_id
from marinbuild.store.manifest import FileEntry, Manifest, OutputError, hash_tree
from marinbuild.targets.rule import CHECKPOINTS_DIR, Target, checkpoint_dir, checkpoint_name


def kept_keys(key: str, steps: list[int]) -> dict[str, str]:
    """The keys of the states the step of `key` keeps, by step: what its entry names, so
    that `cache gc` keeps them as long as it keeps the keeper (docs/checkpoints.md)."""
    return {str(step): keys.checkpoint_key(key, step) for step in steps}


def publish_kept_state(
    cache: ActionCache,
    of: str,
    of_key: str,
    step: int,
    files: Path,
    attempt: str | None,
    invocation: dict[str, Any],
) -> Outputs:
    """Publish the state `of` (whose key is `of_key`) kept at `step` from `files`, unless
    its entry exists already. `attempt` is the keeper's attempt when it publishes while
    running (None when published from its output), `invocation` who publishes it."""
    recipe = keys.checkpoint_recipe(of_key, step)
    key = keys.action_key(recipe)
    name = checkpoint_name(of, step)
    with cache.lease(key):
        found = cache.lookup(key).outputs
        if found is not None:
            return found
        staging = cache.new_staging()
        try:
            shutil.copytree(files, staging.out, dirs_exist_ok=True)
            provenance = {
                "label": name,
                "checkpoint_of": {"label": of, "key": of_key, "step": step},
                "attrs": recipe["attrs"],
                "attempt": attempt,
                "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                **invocation,
            }
            return cache.publish(
                Attempt(key, name, new_attempt_id(), staging), recipe, provenance, hash_tree(staging.out)
            )
        finally:
            shutil.rmtree(staging.root, ignore_errors=True)


def settle_kept_states(
    cache: ActionCache,
    of: str,
    of_key: str,
    steps: list[int],
    out: Path,
    attempt: str | None,
    invocation: dict[str, Any],
) -> None:
    """Once the step of `of_key` (`of`) ended well, before its output `out` is hashed:
    each state it keeps at `steps` becomes its entry, published now from
    `checkpoint_dir(step)` of `out` unless it was while the step ran, and `checkpoints/`
    leaves `out`. A kept state in neither place, or anything else under `checkpoints/`,
    fails the step (OutputError): what reads the state must never be left without it."""
    root = out / CHECKPOINTS_DIR
    expected = {Path(checkpoint_dir(step)).name for step in steps}
    stray = sorted(path.name for path in root.iterdir() if path.name not in expected) if root.is_dir() else []
    if stray:
        raise OutputError(
            f"{CHECKPOINTS_DIR}/{stray[0]} of the output is no state this step keeps "
            f"(it keeps {', '.join(checkpoint_dir(step) + '/' for step in steps) or 'none'})"
        )
    for step in steps:
        files = out / checkpoint_dir(step)
        if cache.lookup(keys.checkpoint_key(of_key, step)).outputs is not None:
            continue  # published while the step ran: the copy in the output is the same state
        if not files.is_dir():
            raise OutputError(
                f"it keeps a checkpoint at step {step}, but published none (ctx.publish_checkpoint) "
                f"and left none under {checkpoint_dir(step)}/ of its output"
            )
        publish_kept_state(cache, of, of_key, step, files, attempt, invocation)
    shutil.rmtree(root, ignore_errors=True)


def settler(
    cache: ActionCache, target: Target, key: str, attempt: str, invocation: dict[str, Any]
) -> Callable[[Path], None] | None:
    """`settle_kept_states` for the attempt `attempt` of `target` under `key`, given its
    output (`StepRun`'s `settle_kept`); None when its rule keeps no states."""
    attr = target.rule.keeps_checkpoints
    if attr is None:
        return None
    steps = list(target.attrs[attr] or [])
    return functools.partial(
        settle_kept_states, cache, str(target.label), key, steps, attempt=attempt, invocation=invocation
    )


def kept_in_output(
    cache: ActionCache, of: str, step: int, outputs: Outputs, invocation: dict[str, Any], dry_run: bool
) -> Outputs | None:
    """The state an entry made before kept states left the output holds under
    `checkpoint_dir(step)` of that output, published as its entry (a dry run publishes
    nothing: its digest follows from the manifest); None if the output holds none."""
    prefix = checkpoint_dir(step) + "/"
    part = Manifest(
        tuple(
            FileEntry(item.path.removeprefix(prefix), item.digest, item.size)
            for item in outputs.manifest.files
            if item.path.startswith(prefix)
        )
    )
    if not part.files:
        return None
    if dry_run:
        return Outputs(keys.checkpoint_key(outputs.key, step), part.tree_digest, part, outputs.directory)
    files = cache.local_dir(outputs) / checkpoint_dir(step)
    return publish_kept_state(cache, of, outputs.key, step, files, None, invocation)
