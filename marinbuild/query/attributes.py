"""Attribute values as `attr()` sees them: found by (dotted) name, matched as text."""

from __future__ import annotations

from marinbuild.targets.attrs import JsonValue
from marinbuild.targets.rule import Target


def attribute_text(value: JsonValue) -> str:
    """An attribute value as `attr()` matches it: Bazel's form for lists (`[a, b]`), Starlark's otherwise."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "[" + ", ".join(attribute_text(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {attribute_text(item)}" for key, item in value.items()) + "}"
    return repr(value)


def attribute_value(target: Target, name: str) -> tuple[bool, JsonValue]:
    """(found, value) of attribute `name`; `config.optimizer.lr` reaches into dict values."""
    first, *keys = name.split(".")
    if first not in target.attrs:
        return False, None
    value = target.attrs[first]
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return False, None
        value = value[key]
    return True, value
