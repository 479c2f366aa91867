"""The small set of exceptions marinbuild raises for bad input.

Every user-facing error is one of these. They carry an optional source location and a
hint, and are caught exactly once, at the CLI edge, which prints `file:line: message`
and exits with status 2. A failing build step is *not* an exception: it is a result
(status `failed`) and leads to exit status 1.
"""

from __future__ import annotations

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
