"""Printing a query's result, in dependency order (see `order`), in one of five formats.

label       one label per line (the default)
label_kind  `genrule rule //a:b`, `source file //a:data.txt`
build       each rule target as it would be written in BUILD.marin, with macros
            expanded and defaults left out, under a `# file:line` comment saying
            where it was declared; source files as a comment line
graph       GraphViz dot: every target, and the edges between them
json        a list of {label, kind, attributes, deps} (deps: every label the
            target's attributes mention, inside the result or not)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from marinbuild.query.universe import Universe, kind_of
from marinbuild.targets.attrs import JsonValue
from marinbuild.targets.rule import COMMON_ATTRS, Target


def _label(labels: Sequence[str], universe: Universe) -> str:
    return "".join(f"{label}\n" for label in labels)


def _label_kind(labels: Sequence[str], universe: Universe) -> str:
    return "".join(f"{kind_of(universe.node(label))} {label}\n" for label in labels)


def _build(labels: Sequence[str], universe: Universe) -> str:
    blocks = []
    for label in labels:
        node = universe.node(label)
        if isinstance(node, Target):
            blocks.append(_rule_text(node))
        else:
            blocks.append(f"# source file {label}\n")
    return "\n".join(blocks)


def _rule_text(target: Target) -> str:
    rule = target.rule
    lines = [f"# {target.location}", f"{rule.name}(", f"    name = {_starlark(target.label.name)},"]
    for name in [*rule.attrs, *(name for name in COMMON_ATTRS if name != "name")]:
        attr, value = rule.all_attrs[name], target.attrs[name]
        if attr.mandatory or value != attr.default:
            lines.append(f"    {name} = {_starlark(value)},")
    return "\n".join([*lines, ")"]) + "\n"


def _starlark(value: JsonValue) -> str:
    """A value as Starlark source (JSON is Starlark, but for the spelling of true, false and null)."""
    if isinstance(value, list):
        return "[" + ", ".join(_starlark(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_starlark(key)}: {_starlark(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (bool, type(None))):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def _graph(labels: Sequence[str], universe: Universe) -> str:
    members = set(labels)
    lines = ["digraph mygraph {", "  node [shape=box];"]
    for label in labels:
        lines.append(f'  "{label}"')
        lines += [f'  "{label}" -> "{dep}"' for dep in universe.direct_labels(label) if dep in members]
    return "\n".join([*lines, "}"]) + "\n"


def _json(labels: Sequence[str], universe: Universe) -> str:
    items = []
    for label in labels:
        node = universe.node(label)
        attributes = dict(node.attrs) if isinstance(node, Target) else {}
        items.append(
            {"label": label, "kind": kind_of(node), "attributes": attributes, "deps": universe.direct_labels(label)}
        )
    return json.dumps(items, indent=2) + "\n"


FORMATS: dict[str, Callable[[Sequence[str], Universe], str]] = {
    "label": _label,
    "label_kind": _label_kind,
    "build": _build,
    "graph": _graph,
    "json": _json,
}
