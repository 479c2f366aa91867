"""The small set of exceptions marinbuild raises for bad input, and the hint they share.

Every user-facing error is one of these. They carry an optional source location and a
hint, and are caught exactly once, at the CLI edge, which prints `file:line: message`
and exits with status 2. A failing build step is *not* an exception: it is a result
(status `failed`) and leads to exit status 1.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    """A place in a BUILD.marin or .star file, relative to the workspace root."""

    file: str
    line: int
    column: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" + (f":{self.column}" if self.column else "")


class MarinbuildError(Exception):
    """Bad input or an unusable environment: exit status 2, nothing written to the store."""

    def __init__(self, message: str, *, location: Location | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.location = location
        self.hint = hint

    def __str__(self) -> str:
        prefix = f"{self.location}: " if self.location else ""
        return prefix + self.message


class WorkspaceError(MarinbuildError):
    """No workspace found, or its configuration is malformed."""


class LabelError(MarinbuildError):
    """A label or target pattern that cannot be parsed."""


class LoadError(MarinbuildError):
    """A BUILD.marin or .star file that does not evaluate: syntax, unknown rule, bad attribute."""


class GraphError(MarinbuildError):
    """The target graph is unusable: unknown targets, dependency cycles."""


class StoreError(MarinbuildError):
    """The store cannot be opened or used."""


class StoreUnavailable(StoreError):
    """The store stopped answering for longer than its retry budget (store/deadlines.py).

    Unlike any other error of a step, it stops the whole build: every other step needs
    the same store, so the build ends at once with exit status 2 rather than failing its
    steps one budget at a time."""


class StoreReadOnly(StoreError):
    """The store refuses writes (a read-only directory, a bucket this account may only
    read). A build whose every step is cached still works; one that must publish cannot."""


class OutputDamaged(StoreError):
    """A published output's bytes are missing or not its manifest's, found when they were
    read (a download); its entry has been quarantined, so the next build rebuilds it."""


class EgressOverBudget(MarinbuildError):
    """Entries a build would copy from a mirror in another region add up to more than its
    egress budget (store/mirrors.py): cross-region bytes cost money, so they are copied
    only when the budget allows it or the builder says `--allow-egress`."""


class ComputeOverBudget(MarinbuildError):
    """The stale steps of a build would take more accelerator-hours, as estimated from their
    FLOPs (targets/compute.py), than `--max-accelerator-hours` allows."""


class ClusterError(MarinbuildError):
    """The Ray cluster to run steps on cannot be reached or used."""


class AcceleratorMissing(MarinbuildError):
    """A step to run on this machine asks for an accelerator (a GPU kind, a TPU) it lacks:
    JAX would fall back to the CPU without a word (actions/execution/accelerators.py)."""


class QueryError(MarinbuildError):
    """A query expression that does not parse, or names what does not exist.

    The message shows the expression with a caret under `column` (1-based): queries are
    typed on one line, and a column is the quickest way back to the typo.
    """

    def __init__(self, message: str, *, expression: str, column: int, hint: str | None = None):
        caret = " " * (column - 1) + "^"
        super().__init__(f"{message} (column {column} of the query)\n    {expression}\n    {caret}", hint=hint)
        self.reason = message
        self.column = column


def did_you_mean(name: str, names: Iterable[str]) -> str | None:
    """A hint naming the closest of `names` to a misspelt `name`, if any is close."""
    close = difflib.get_close_matches(name, list(names), n=3)
    return f"did you mean {', '.join(repr(c) for c in close)}?" if close else None
