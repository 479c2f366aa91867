"""The syntax tree of a query: frozen values, each with the column it starts at.

Every expression evaluates to a set of targets. Function arguments are expressions,
words (a regular expression, an attribute name) or integers (a depth, a count), as each
function's signature says (`functions.SIGNATURES`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TargetLiteral:
    """A label or target pattern: `//pkg:name`, `//pkg:all`, `//pkg/...`, `:name`."""

    pattern: str
    column: int


@dataclass(frozen=True)
class Variable:
    """`$name`, bound by an enclosing `let`."""

    name: str
    column: int


@dataclass(frozen=True)
class Let:
    """`let name = value in body`."""

    name: str
    value: Expression
    body: Expression
    column: int


@dataclass(frozen=True)
class SetOperation:
    """`left intersect|union|except right` (also written `^`, `+`, `-`)."""

    operator: str
    left: Expression
    right: Expression
    column: int


@dataclass(frozen=True)
class SetLiteral:
    """`set(a b c)`: the union of the target patterns listed."""

    items: tuple[TargetLiteral, ...]
    column: int


@dataclass(frozen=True)
class Word:
    """A function argument taken as text: a regular expression or an attribute name."""

    text: str
    column: int


@dataclass(frozen=True)
class FunctionCall:
    name: str
    args: tuple[Expression | Word | int, ...]
    column: int


Expression = TargetLiteral | Variable | Let | SetOperation | SetLiteral | FunctionCall
