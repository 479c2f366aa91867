"""Action keys: BLAKE3 over the canonical JSON of a step's recipe.

The recipe holds the rule's name and version, the identity attributes, and the store's
salt. Every label inside an attribute is replaced by what it stands for — a source
file by its content digest, a dependency by the tree digest of its outputs — so a key
never contains a target name, a path, a user, a host or a time: renaming a target or
moving the store changes no key, and a dependency rebuilt to identical bytes leaves its
dependents' keys (and so their outputs) untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from marinbuild.hashing import canonical_json, digest_bytes
from marinbuild.targets.rule import Target

KEY_FORMAT = 1


def source_token(name: str, digest: str) -> str:
    """How a source file appears in a recipe: its name within its package and its content."""
    return f"file:{name}@{digest}"


def output_token(tree_digest: str) -> str:
    """How a dependency appears in a recipe: the digest of the outputs it produced."""
    return f"output:{tree_digest}"


def recipe(target: Target, token: Callable[[str], str], salt: str, external: str | None = None) -> dict[str, Any]:
    """`external` is the digest of the rule's external inputs, for rules that declare them."""
    return {
        "format": KEY_FORMAT,
        "rule": target.rule.name,
        "version": target.rule.version,
        "attrs": target.map_labels(token, identity_only=True),
        "salt": salt,
        **({"external": external} if external is not None else {}),
    }


def external_digest(files: Mapping[str, Path], digest: Callable[[Path], str]) -> str:
    """One digest over (name, content digest) of every external input file."""
    return digest_bytes(canonical_json({name: digest(path) for name, path in sorted(files.items())}).encode())


def action_key(recipe_: dict[str, Any]) -> str:
    """The full 256-bit key, hex; `short()` is for display only."""
    return digest_bytes(canonical_json(recipe_).encode())


def short(key: str) -> str:
    return key[:12]
