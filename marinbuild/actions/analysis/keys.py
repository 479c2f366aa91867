"""Action keys: BLAKE3 over the canonical JSON of a step's recipe.

The recipe holds the rule's name and version, the identity attributes, and the store's
salt. Every label inside an attribute is replaced by what it stands for — a source
file by its content digest, a dependency by the tree digest of its outputs — so a key
never contains a target name, a path, a user, a host or a time: renaming a target or
moving the store changes no key, and a dependency rebuilt to identical bytes leaves its
dependents' keys (and so their outputs) untouched.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from marinbuild.hashing import StatCache, canonical_json, digest_bytes, digest_json, module_digest
from marinbuild.targets.identity import fill
from marinbuild.targets.rule import Rule, Target

KEY_FORMAT = 1


SOURCE_PREFIX, OUTPUT_PREFIX = "file:", "output:"


def source_token(name: str, digest: str) -> str:
    """How a source file appears in a recipe: its name within its package and its content."""
    return f"{SOURCE_PREFIX}{name}@{digest}"


def output_token(tree_digest: str) -> str:
    """How a dependency appears in a recipe: the digest of the outputs it produced."""
    return f"{OUTPUT_PREFIX}{tree_digest}"


def recipe(
    target: Target, token: Callable[[str], str], salt: str, external: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """`external` is the digest of the rule's external inputs, for rules that declare them;
    `code` the digest of the rule's source, for builds that make code part of identity
    (`--strict-code`); by default a rule's explicit version stands for its code."""
    attrs = target.map_labels(token, identity_only=True)
    return _recipe(target.rule.name, target.rule.version, attrs, salt, external, code)


def _recipe(rule: str, version: int, attrs: Any, salt: str, external: str | None, code: str | None) -> dict[str, Any]:
    return {
        "format": KEY_FORMAT,
        "rule": rule,
        "version": version,
        "attrs": attrs,
        "salt": salt,
        **({"external": external} if external is not None else {}),
        **({"code": code} if code is not None else {}),
    }


def target_key(
    target: Target, token: Callable[[str], str], salt: str, external: str | None = None, code: str | None = None
) -> str:
    """`action_key(recipe(...))` of the same arguments: the same key, made from the target's
    identity template (targets/identity.py) where it has one, so that a no-op build, which
    computes every key and needs no recipe, serialises none."""
    around = _around_attrs(target.rule.name, target.rule.version, salt, external, code)
    if target.identity is None or around is None:
        return action_key(recipe(target, token, salt, external, code))
    head, tail = around
    return digest_bytes(f"{head}{fill(target.identity, token)}{tail}".encode())


_ATTRS = "\x00attrs\x00"


@functools.lru_cache(maxsize=1024)
def _around_attrs(rule: str, version: int, salt: str, external: str | None, code: str | None) -> tuple[str, str] | None:
    """The canonical JSON of a recipe before and after its attributes (None if a value
    holds the marker of where they go: then there is no telling)."""
    pieces = canonical_json(_recipe(rule, version, _ATTRS, salt, external, code)).split(canonical_json(_ATTRS))
    return (pieces[0], pieces[1]) if len(pieces) == 2 else None


# The "rule" of a kept state's entry: it is made by the step that keeps it, not by a rule.
CHECKPOINT_RULE = "checkpoint"


def checkpoint_recipe(key: str, step: int) -> dict[str, Any]:
    """The recipe of the state the step of `key` kept at `step` (`Rule.keeps_checkpoints`).

    Derived from the key of the step that keeps it, so it is known as soon as that key is,
    before the step runs; its entry verifies itself as any entry does (the recipe hashes to
    its key). Readers' keys hold the state's own digest (`output_token`), so a run rebuilt
    to the same bytes up to `step` (a longer stable phase, say) leaves them cached."""
    return {"format": KEY_FORMAT, "rule": CHECKPOINT_RULE, "version": 1, "attrs": {"of": key, "step": step}}


def checkpoint_key(key: str, step: int) -> str:
    return action_key(checkpoint_recipe(key, step))


# The "rule" of a shard unit's entry (targets/shards.py): a unit of a sharded step's work.
SHARD_RULE = "shard"


def shard_recipe(
    step_recipe: Mapping[str, Any], impl: str, attrs: Mapping[str, Any], inputs: Mapping[str, str]
) -> dict[str, Any]:
    """The recipe of one unit of a sharded step whose recipe is `step_recipe`: the step's
    rule and version (and code and external inputs, where the step's recipe holds them),
    the salt, the unit's function and the parameters it reads, and the content digest of
    each file it reads, by role (`inputs`). Not the step's key, nor any file name: a unit
    of a step whose input gained a file, or whose file was renamed, keeps its key, and a
    parameter the unit does not read changes none."""
    return {
        "format": KEY_FORMAT,
        "rule": SHARD_RULE,
        "version": 1,
        "attrs": {
            "rule": step_recipe["rule"],
            "version": step_recipe["version"],
            "impl": impl,
            "attrs": dict(attrs),
            "inputs": dict(inputs),
        },
        "salt": step_recipe["salt"],
        **{name: step_recipe[name] for name in ("external", "code") if name in step_recipe},
    }


def code_digest(rule: Rule, stat_cache: StatCache) -> str:
    """The digest of a rule's implementation source: the module of its `impl` and the
    modules it names in `code_modules`. Recorded in every entry, so that `explain`,
    `build` and `query stale()` can tell when the code changed since an output was built."""
    return digest_json(
        {module: module_digest(module, stat_cache) for module in (rule.impl.__module__, *rule.code_modules)}
    )


def external_digest(files: Mapping[str, Path], digest: Callable[[Path], str]) -> str:
    """One digest over (name, content digest) of every external input file."""
    return digest_json({name: digest(path) for name, path in sorted(files.items())})


def action_key(recipe_: dict[str, Any]) -> str:
    """The full 256-bit key, hex; `short()` is for display only."""
    return digest_json(recipe_)


def short(key: str) -> str:
    return key[:12]
