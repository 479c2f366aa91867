"""The typed parameters of the web-data blocks, checked when they are made.

A filter, the dedup's MinHash settings and the quality classifier's hyper-parameters are
each a small frozen dataclass subclassing `Parameters`: its fields are its parameters,
their type hints what each must be. Making one converts what JSON cannot tell apart (an
int where a number is declared becomes a float, a list a tuple, so that `1` and `1.0` are
one recipe) and checks types, then the values (`problems`); anything wrong is one
`AttrError` naming the block and what is valid, which the loader turns into an error at
the BUILD line. `from_spec` makes one from the JSON-like dict a BUILD file gives, an
unknown key an error with a did-you-mean hint; `to_json` gives back every parameter,
defaults included, which is what a step's key holds.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, Self

from marinbuild.errors import did_you_mean
from marinbuild.targets.attrs import AttrError, JsonValue


class Parameters:
    """A block's parameters; subclasses are frozen dataclasses whose fields are the parameters."""

    @classmethod
    def subject(cls) -> str:
        """How errors name the block: "filter 'gopher_quality'", "fuzzy dedup"."""
        raise NotImplementedError

    def problems(self) -> list[str]:
        """What is wrong with the parameters' values (their types are checked before)."""
        return []

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        wrong = []
        for spec in fields(self):
            value = _as_declared(hints[spec.name], getattr(self, spec.name))
            if value is None:
                wrong.append(f"'{spec.name}' must be {_describe(hints[spec.name])}, got {getattr(self, spec.name)!r}")
            else:
                object.__setattr__(self, spec.name, value)
        wrong = wrong or self.problems()
        if wrong:
            raise AttrError(f"{self.subject()}: " + "; ".join(wrong))

    @classmethod
    def from_spec(cls, spec: Mapping[str, JsonValue]) -> Self:
        """The parameters a JSON-like dict gives, the others at their defaults."""
        if not isinstance(spec, Mapping):
            raise AttrError(f"{cls.subject()}: expected a dict of parameters, got {spec!r}")
        names = [spec_field.name for spec_field in fields(cls)]
        unknown = [key for key in spec if key not in names]
        if unknown:
            raise AttrError(
                f"{cls.subject()} has no parameter '{unknown[0]}': its parameters are {', '.join(names)}",
                hint=did_you_mean(unknown[0], names),
            )
        return cls(**spec)

    def to_json(self) -> dict[str, JsonValue]:
        """Every parameter, defaults included: the block's part of a step's recipe."""
        return {spec.name: _json(getattr(self, spec.name)) for spec in fields(self)}


def _as_declared(hint: Any, value: Any) -> Any:
    """`value` as the type `hint` declares (an int where a float is declared becomes a float,
    a list a tuple), or None if it is not of that type."""
    if hint is bool:
        return value if isinstance(value, bool) else None
    if hint is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if hint is float:
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if hint is str:
        return value if isinstance(value, str) else None
    if typing.get_origin(hint) is tuple and isinstance(value, list | tuple):
        arguments = typing.get_args(hint)
        items = arguments[:1] * len(value) if arguments[-1] is Ellipsis else arguments
        if len(items) != len(value):
            return None
        converted = tuple(_as_declared(item, element) for item, element in zip(items, value))
        return None if any(element is None for element in converted) else converted
    return None


def _describe(hint: Any, plural: bool = False) -> str:
    """How an error names the type `hint`: 'an int', 'a list of strings', 'a list of [int, number] pairs'."""
    if typing.get_origin(hint) is tuple:
        arguments = typing.get_args(hint)
        if arguments[-1] is Ellipsis:
            return f"a list of {_describe(arguments[0], plural=True)}"
        pair = "[" + ", ".join(_describe(argument).split()[-1] for argument in arguments) + "]"
        return f"{pair} pairs" if plural else pair
    singular = {bool: "a bool", int: "an int", float: "a number", str: "a string"}[hint]
    return singular.split()[-1] + "s" if plural else singular


def _json(value: Any) -> JsonValue:
    return [_json(item) for item in value] if isinstance(value, tuple) else value


def fraction(name: str, value: float) -> list[str]:
    """The problem with a parameter that must be a share, if it is not one."""
    return [] if 0 <= value <= 1 else [f"'{name}' must be between 0 and 1, got {value}"]
