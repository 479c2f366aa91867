"""The query functions and what each takes: the parser reads arguments by these kinds.

Bazel's functions keep Bazel's names and arguments. The five that ask the store
(`cached`, `mirrored`, `stale`, `failed`, `pending`) are marinbuild's own.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Arg(enum.Enum):
    EXPRESSION = "expression"
    WORD = "word"
    INTEGER = "integer"


@dataclass(frozen=True)
class Signature:
    args: tuple[Arg, ...]
    required: int  # the rest are optional
    store: bool = False  # evaluated against the store (a marinbuild extension)

    @property
    def takes_one_expression(self) -> bool:
        """Whether `marinbuild query NAME TARGET...` can stand for `NAME(TARGET + ...)`."""
        return self.required == 1 and self.args[0] is Arg.EXPRESSION


_E, _W, _I = Arg.EXPRESSION, Arg.WORD, Arg.INTEGER

SIGNATURES: dict[str, Signature] = {
    "deps": Signature((_E, _I), 1),
    "rdeps": Signature((_E, _E, _I), 2),
    "allpaths": Signature((_E, _E), 2),
    "somepath": Signature((_E, _E), 2),
    "kind": Signature((_W, _E), 2),
    "filter": Signature((_W, _E), 2),
    "attr": Signature((_W, _W, _E), 3),
    "labels": Signature((_W, _E), 2),
    "some": Signature((_E, _I), 1),
    "siblings": Signature((_E,), 1),
    "buildfiles": Signature((_E,), 1),
    "cached": Signature((_E,), 1, store=True),
    "mirrored": Signature((_E,), 1, store=True),
    "stale": Signature((_E,), 1, store=True),
    "failed": Signature((_E,), 1, store=True),
    "pending": Signature((_E,), 1, store=True),
}
