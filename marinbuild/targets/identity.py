"""A target's identity attributes as canonical JSON with a hole for each label.

An action key is the digest of a recipe's canonical JSON (actions/analysis/keys.py), and all of a
recipe but the tokens its labels stand for is fixed when the BUILD file is read. So the
JSON is written once, when the target is declared, with a hole where each label's token
goes, and kept with the target in the package cache: a no-op build of 10,000 targets then
fills 10,000 templates instead of serialising 10,000 recipes (two thirds of its key work).

Filling is exact: a token goes where its label was, JSON-escaped as canonical JSON would
escape it, so the text is the canonical JSON of the attributes with the tokens in place,
byte for byte. Where that cannot hold, there is no template and the key is computed from
the recipe as always: a label used as a dictionary key (a mixture's weights), whose token
would change the order of the sorted keys.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable

from marinbuild.hashing import canonical_json
from marinbuild.targets.attrs import JsonValue

# Marks a hole while the template is written. Random per process: no attribute value can
# hold one by design, and one holding it by chance would make the count of holes wrong,
# which is checked.
_NONCE = secrets.token_hex(8)
_HOLE = re.compile(f"@{_NONCE}:([0-9]+)@")


# The text between the holes (one more piece than holes), and the name whose token fills
# each hole, in the order the holes appear. Plain tuples: the package cache holds one per
# target, and unpickling 10,000 of them must cost next to nothing.
IdentityTemplate = tuple[tuple[str, ...], tuple[str, ...]]


def identity_template(map_labels: Callable[[Callable[[str], str]], JsonValue]) -> IdentityTemplate | None:
    """The template of the attributes `map_labels(fn)` gives (every label replaced by `fn`
    of it), or None where filling it could not give their canonical JSON."""
    names: list[str] = []

    def hole(name: str) -> str:
        names.append(name)
        return f"@{_NONCE}:{len(names) - 1}@"

    attrs = map_labels(hole)
    if names and _hole_in_a_key(attrs):
        return None
    split = _HOLE.split(canonical_json(attrs))
    order = [int(index) for index in split[1::2]]
    if sorted(order) != list(range(len(names))):
        return None
    return tuple(split[0::2]), tuple(names[index] for index in order)


def fill(template: IdentityTemplate, token: Callable[[str], str]) -> str:
    """The canonical JSON of the attributes, each label replaced by `token` of it."""
    pieces, names = template
    if not names:
        return pieces[0]
    filled = [pieces[0]]
    for name, piece in zip(names, pieces[1:]):
        filled.append(canonical_json(token(name))[1:-1])
        filled.append(piece)
    return "".join(filled)


def _hole_in_a_key(value: JsonValue) -> bool:
    if isinstance(value, dict):
        return any(_NONCE in key or _hole_in_a_key(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_hole_in_a_key(item) for item in value)
    return False
