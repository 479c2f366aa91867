"""Attribute schemas: what a rule accepts, what is identity, and where labels hide.

A BUILD file hands a rule JSON-like values. The schema checks each value's type where it
is written (so the error points at the BUILD line), turns relative labels into absolute
ones, and knows how to find and replace the labels inside a value. Replacing labels by
the digests of what they name is what makes a key independent of target names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from marinbuild.errors import did_you_mean
from marinbuild.labels import parse_label

JsonValue = Any  # dict[str, JsonValue] | list[JsonValue] | str | int | float | bool | None
LabelMap = Callable[[str], str]

REQUIRED: Any = object()  # sentinel default: the attribute is mandatory


class AttrError(ValueError):
    """A bad attribute value, with a hint the CLI prints under the error (`did you mean ...?`)."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


def json_type_error(value: JsonValue) -> str | None:
    """Return why `value` is not JSON-like, or None if it is."""
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return (
            None
            if value == value and value not in (float("inf"), float("-inf"))
            else "NaN and infinities are not allowed"
        )
    if isinstance(value, (list, tuple)):
        for item in value:
            if (why := json_type_error(item)) is not None:
                return why
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"dict keys must be strings, got {type(key).__name__} {key!r}"
            if (why := json_type_error(item)) is not None:
                return why
        return None
    return f"values must be JSON-like (dict, list, string, number, bool, None), got {type(value).__name__}"


def _freeze_lists(value: JsonValue) -> JsonValue:
    """Starlark tuples arrive as Python tuples; store every sequence as a list."""
    if isinstance(value, (list, tuple)):
        return [_freeze_lists(item) for item in value]
    if isinstance(value, dict):
        return {key: _freeze_lists(item) for key, item in value.items()}
    return value


@dataclass(frozen=True)
class AttrType:
    """One kind of attribute value.

    `normalize` checks a value and makes its labels absolute (raising ValueError with a
    message for the user); `map_labels` rebuilds a normalized value with every label
    replaced, for keys and for handing paths to rule implementations.
    """

    name: str
    normalize: Callable[[JsonValue, str], JsonValue]
    map_labels: Callable[[JsonValue, LabelMap], JsonValue]

    def labels(self, value: JsonValue) -> list[str]:
        found: list[str] = []
        self.map_labels(value, lambda label: found.append(label) or label)
        return found


def _no_labels(value: JsonValue, _fn: LabelMap) -> JsonValue:
    return value


def _scalar(name: str, *types: type) -> AttrType:
    def normalize(value: JsonValue, _package: str) -> JsonValue:
        if isinstance(value, bool) and bool not in types:
            raise ValueError(f"expected {name}, got bool {value!r}")
        if not isinstance(value, types):
            raise ValueError(f"expected {name}, got {type(value).__name__} {value!r}")
        return value

    return AttrType(name, normalize, _no_labels)


def _normalize_string_list(value: JsonValue, _package: str) -> JsonValue:
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"expected a list of strings, got {value!r}")
    return list(value)


def _normalize_json(value: JsonValue, _package: str) -> JsonValue:
    if (why := json_type_error(value)) is not None:
        raise ValueError(why)
    return _freeze_lists(value)


def _normalize_dict(value: JsonValue, package: str) -> JsonValue:
    if not isinstance(value, dict):
        raise ValueError(f"expected a dict, got {type(value).__name__} {value!r}")
    return _normalize_json(value, package)


def absolute_label(text: JsonValue, package: str) -> str:
    if not isinstance(text, str):
        raise ValueError(f"expected a label string, got {type(text).__name__} {text!r}")
    return str(parse_label(text, package))


def _normalize_label(value: JsonValue, package: str) -> JsonValue:
    return absolute_label(value, package)


def _normalize_optional_label(value: JsonValue, package: str) -> JsonValue:
    return None if value is None else absolute_label(value, package)


def _map_optional_label(value: JsonValue, fn: LabelMap) -> JsonValue:
    return None if value is None else fn(value)


def _normalize_label_list(value: JsonValue, package: str) -> JsonValue:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected a list of labels, got {type(value).__name__} {value!r}")
    labels = [absolute_label(item, package) for item in value]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ValueError(f"duplicate labels {duplicates}")
    return labels


def _map_label_list(value: JsonValue, fn: LabelMap) -> JsonValue:
    return [fn(label) for label in value]


def _normalize_label_keyed_dict(value: JsonValue, package: str) -> JsonValue:
    if not isinstance(value, dict):
        raise ValueError(f"expected a dict keyed by labels, got {type(value).__name__} {value!r}")
    normalized = {absolute_label(label, package): _normalize_json(item, package) for label, item in value.items()}
    if len(normalized) != len(value):
        raise ValueError("two keys name the same label")
    return normalized


def _map_label_keyed_dict(value: JsonValue, fn: LabelMap) -> JsonValue:
    return {fn(label): item for label, item in value.items()}


def _normalize_mixture(value: JsonValue, package: str) -> JsonValue:
    """A label, {label: weight}, or a list of labels whose weights another target gives."""
    if isinstance(value, str):
        return absolute_label(value, package)
    if isinstance(value, list):
        return _normalize_label_list(value, package)
    mixture = _normalize_label_keyed_dict(value, package)
    for label, weight in mixture.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            raise ValueError(f"the weight of {label} must be a non-negative number, got {weight!r}")
    if not any(mixture.values()):
        raise ValueError("a mixture needs at least one positive weight")
    return mixture


def _map_mixture(value: JsonValue, fn: LabelMap) -> JsonValue:
    if isinstance(value, str):
        return fn(value)
    return _map_label_list(value, fn) if isinstance(value, list) else _map_label_keyed_dict(value, fn)


# `$(location LABEL)` and `$(locations LABEL)` inside a command template.
LOCATION_REF = re.compile(r"\$\((locations?)\s+([^)\s]+)\s*\)")


def _normalize_template(value: JsonValue, package: str) -> JsonValue:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__} {value!r}")
    return LOCATION_REF.sub(lambda m: f"$({m.group(1)} {absolute_label(m.group(2), package)})", value)


def _map_template(value: JsonValue, fn: LabelMap) -> JsonValue:
    return LOCATION_REF.sub(lambda m: f"$({m.group(1)} {fn(m.group(2))})", value)


def _normalize_function(value: JsonValue, package: str) -> JsonValue:
    if not isinstance(value, str) or value.count(":") < 1:
        raise ValueError(f"expected 'FILE_LABEL:function' such as '//pkg:steps.py:prepare', got {value!r}")
    file_label, _, function = value.rpartition(":")
    if not function.isidentifier() or not file_label.endswith(".py"):
        raise ValueError(f"expected 'FILE_LABEL:function' naming a .py file and a function, got {value!r}")
    return f"{absolute_label(file_label, package)}:{function}"


def _map_function(value: JsonValue, fn: LabelMap) -> JsonValue:
    file_label, _, function = value.rpartition(":")
    return f"{fn(file_label)}:{function}"


def _normalize_seconds(value: JsonValue, _package: str) -> JsonValue:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"expected a positive number of seconds (or None), got {value!r}")
    return float(value)


STRING = _scalar("a string", str)
INT = _scalar("an int", int)
FLOAT = _scalar("a number", int, float)
BOOL = _scalar("a bool", bool)
STRING_LIST = AttrType("string_list", _normalize_string_list, _no_labels)
DICT = AttrType("dict", _normalize_dict, _no_labels)
JSON = AttrType("json", _normalize_json, _no_labels)
LABEL = AttrType("label", _normalize_label, lambda value, fn: fn(value))
OPTIONAL_LABEL = AttrType("optional_label", _normalize_optional_label, _map_optional_label)
LABEL_LIST = AttrType("label_list", _normalize_label_list, _map_label_list)
LABEL_KEYED_DICT = AttrType("label_keyed_dict", _normalize_label_keyed_dict, _map_label_keyed_dict)
# One label, or weights {label: weight} over several (a training-data mixture).
MIXTURE = AttrType("mixture", _normalize_mixture, _map_mixture)
TEMPLATE = AttrType("template", _normalize_template, _map_template)
FUNCTION = AttrType("function", _normalize_function, _map_function)
# A duration in seconds, or None.
SECONDS = AttrType("seconds", _normalize_seconds, _no_labels)


# -- structs: a dict of named, typed scalar fields with defaults ------------------------------

_KIND_NAMES = {int: "an int", float: "a number", bool: "a bool", str: "a string"}


@dataclass(frozen=True)
class Computed:
    """A field default computed from the struct's other fields once they are resolved.

    `doc` stands for the function wherever the schema is described (a package cache's
    fingerprint, documentation): say what it computes, e.g. "steps".
    """

    fn: Callable[[Mapping[str, JsonValue]], JsonValue]
    doc: str


def same_as(other: str) -> Computed:
    """A default that copies another field's resolved value (e.g. `eval_interval` = `steps`)."""
    return Computed(lambda fields: fields[other], other)


@dataclass(frozen=True)
class Field:
    """One field of a struct: a JSON scalar of one or more kinds, and its default.

    `kind` is int, float, bool or str, or a tuple of them. A bool is never an int; an int
    is accepted where a number (float) is expected, and stored as a float unless int is
    a kind too (then it stays an int: `warmup = 100` means steps, `warmup = 0.1` a
    fraction). `optional` also accepts None. `choices` restricts a string value.
    """

    name: str
    kind: type | tuple[type, ...]
    default: JsonValue | Computed = REQUIRED
    optional: bool = False
    choices: tuple[str, ...] = ()
    doc: str = ""

    @property
    def kinds(self) -> tuple[type, ...]:
        return self.kind if isinstance(self.kind, tuple) else (self.kind,)

    def expected(self) -> str:
        names = [_KIND_NAMES[kind] for kind in self.kinds if not (kind is int and float in self.kinds)]
        return " or ".join(names + (["None"] if self.optional else []))

    def check(self, value: JsonValue) -> JsonValue:
        """The value as stored, or AttrError saying why it is not one."""
        if value is None and self.optional:
            return None
        kinds = self.kinds
        if isinstance(value, bool):
            ok = bool in kinds
        elif isinstance(value, int):
            ok = int in kinds or float in kinds
            value = value if int in kinds else float(value)
        else:
            ok = isinstance(value, tuple(kind for kind in kinds if kind is not int))
        if not ok:
            shown = "None" if value is None else f"{type(value).__name__} {value!r}"
            raise AttrError(f"field '{self.name}': expected {self.expected()}, got {shown}")
        if isinstance(value, str) and self.choices and value not in self.choices:
            raise AttrError(
                f"field '{self.name}': expected one of {', '.join(repr(c) for c in self.choices)}, got {value!r}",
                hint=did_you_mean(value, self.choices),
            )
        return value

    def describe(self) -> str:
        """The field as one line of schema: `name: kinds [choices] = default`."""
        kinds = "|".join(kind.__name__ for kind in self.kinds) + ("|None" if self.optional else "")
        choices = f" in {list(self.choices)}" if self.choices else ""
        if self.default is REQUIRED:
            default = " (required)"
        elif isinstance(self.default, Computed):
            default = f" = <{self.default.doc}>"
        else:
            default = f" = {json.dumps(self.default)}"
        return f"{self.name}: {kinds}{choices}{default}"


def struct(fields: Sequence[Field]) -> AttrType:
    """A dict of named scalar fields, checked and completed where the BUILD file is read.

    An unknown field (with a "did you mean" hint), a value of the wrong kind and a missing
    required field are errors; every field left out gets its default, computed ones last
    and in order. The normalized value holds every field, so the recipe (and the key, and
    what `explain` and `show` print) is the effective configuration: a changed default is
    a changed recipe. The type's name spells the whole schema, so a changed schema is a
    changed rule for the package cache.
    """
    fields = tuple(fields)
    by_name = {field.name: field for field in fields}
    if len(by_name) != len(fields):
        raise ValueError("a struct declares a field twice")
    for field in fields:
        if field.default is not REQUIRED and not isinstance(field.default, Computed):
            field.check(field.default)  # a schema whose defaults fail its own checks is a bug

    def normalize(value: JsonValue, _package: str) -> JsonValue:
        if not isinstance(value, dict):
            raise AttrError(f"expected a dict of fields, got {type(value).__name__} {value!r}")
        for name in value:
            if name not in by_name:
                raise AttrError(
                    f"unknown field {name!r}",
                    hint=did_you_mean(str(name), by_name) or f"the fields are: {', '.join(by_name)}",
                )
        resolved: dict[str, JsonValue] = {}
        for field in fields:
            if field.name in value:
                resolved[field.name] = field.check(value[field.name])
            elif field.default is REQUIRED:
                raise AttrError(f"missing required field '{field.name}'")
            elif not isinstance(field.default, Computed):
                resolved[field.name] = field.default
        for field in fields:
            if isinstance(field.default, Computed) and field.name not in resolved:
                resolved[field.name] = field.check(field.default.fn(resolved))
        return {field.name: resolved[field.name] for field in fields}

    name = "struct(" + ", ".join(field.describe() for field in fields) + ")"
    return AttrType(name, normalize, _no_labels)


def tagged_struct(tag: str, variants: Mapping[str, Sequence[Field]], default: str) -> AttrType:
    """A struct whose fields depend on one of them, `tag`: each of its values names a
    variant with fields of its own (a model's family: a Mixtral has experts, a Llama none).

    A value without the tag is of the `default` variant, and its normalized dict leaves
    the tag out, as it does when the tag is written out: the dicts of that variant keep the
    keys they had before the other variants existed. Every other variant's dict holds the
    tag, so two variants' dicts always differ. Errors in a non-default variant's fields
    name the variant.
    """
    structs = {variant: struct(fields) for variant, fields in variants.items()}
    chooser = Field(tag, str, default, choices=tuple(variants))

    def normalize(value: JsonValue, package: str) -> JsonValue:
        if not isinstance(value, dict):
            raise AttrError(f"expected a dict of fields, got {type(value).__name__} {value!r}")
        variant = chooser.check(value.get(tag, default))
        fields = {name: field for name, field in value.items() if name != tag}
        if variant == default:
            return structs[variant].normalize(fields, package)
        try:
            return {tag: variant, **structs[variant].normalize(fields, package)}
        except AttrError as error:
            raise AttrError(f"{error} ({tag} {variant!r})", hint=error.hint) from None

    name = f"tagged_struct({tag}, default {default}: " + ", ".join(
        f"{variant}={found.name}" for variant, found in structs.items()
    )
    return AttrType(name + ")", normalize, _no_labels)


@dataclass(frozen=True)
class Attr:
    """An attribute of a rule.

    `identity=False` marks attributes that say where or how a step runs (resources,
    description, tags): they never enter the action key, so changing them reruns nothing.
    `omit_default=True` leaves an identity attribute out of the key while it holds its
    default: an attribute added to a rule whose outputs exist, which keep their keys (a
    target that sets it gets a new one).
    """

    type: AttrType
    default: JsonValue = REQUIRED
    identity: bool = True
    doc: str = ""
    omit_default: bool = False

    @property
    def mandatory(self) -> bool:
        return self.default is REQUIRED
