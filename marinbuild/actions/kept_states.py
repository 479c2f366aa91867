"""Publishing a kept state (`ctx.publish_checkpoint`) as an entry of its own.

One function, so that a step running on this machine (the scheduler) and one running on a
Ray host (cluster/ray_host.py) publish the same entry the same way: under the state's own
key, derived from the keeper's key and the step, under that key's lease, the first entry
winning (every one holds the same bytes: training here is deterministic).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from marinbuild.actions import keys
from marinbuild.store import ActionCache, Attempt, Outputs, new_attempt_id
from marinbuild.store.manifest import hash_tree
from marinbuild.targets.rule import checkpoint_name


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
