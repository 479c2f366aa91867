"""Target patterns as typed on the command line: `//pkg:all`, `//pkg/...`, `-//pkg:x`.

Patterns are resolved against the current directory inside the workspace, as Bazel does,
so `marinbuild :all` inside `experiments/hello` means `//experiments/hello:all`.
"""

from __future__ import annotations

import enum
import posixpath
from dataclasses import dataclass

from marinbuild.errors import LabelError
from marinbuild.labels.label import Label, check_name, check_package

_ALL_NAMES = ("all", "*", "all-targets")
_FILE_WILDCARDS = ("*", "all-targets")


class PatternKind(enum.Enum):
    TARGET = "target"  # one label
    PACKAGE = "package"  # every rule target of one package (`:all`)
    RECURSIVE = "recursive"  # every rule target of every package below (`/...`)


@dataclass(frozen=True)
class TargetPattern:
    kind: PatternKind
    package: str
    name: str | None = None
    negative: bool = False
    text: str = ""
    # `:*` and `:all-targets` also name the package's source files. Builds ignore that
    # (files need no building); query, like Bazel's, lists them.
    files: bool = False

    @property
    def label(self) -> Label:
        assert self.kind is PatternKind.TARGET and self.name is not None
        return Label(self.package, self.name)

    def covers_package(self, package: str) -> bool:
        """Whether `package` lies under this recursive pattern's root."""
        return self.package == "" or package == self.package or package.startswith(self.package + "/")

    def matches(self, label: Label) -> bool:
        """Whether the pattern names `label`, without loading anything (`manual` tags aside):
        for records of targets that may no longer exist."""
        if self.kind is PatternKind.TARGET:
            return label == self.label
        if self.kind is PatternKind.PACKAGE:
            return label.package == self.package
        return self.covers_package(label.package)


def matches_patterns(patterns: list[TargetPattern], label: Label) -> bool:
    """Whether patterns applied in order (a subtraction removes) take in `label`; no pattern takes in all."""
    taken = not patterns or patterns[0].negative
    for pattern in patterns:
        if pattern.matches(label):
            taken = not pattern.negative
    return taken


def parse_pattern(text: str, cwd_package: str = "") -> TargetPattern:
    """Parse one command-line pattern; a leading '-' marks a subtraction."""
    original = text
    negative = text.startswith("-")
    if negative:
        text = text[1:]
    if text == "":
        raise LabelError(f"empty target pattern '{original}'")
    if text.startswith("//"):
        package_part, sep, name = text[2:].partition(":")
    else:
        relative, sep, name = text.partition(":")
        package_part = posixpath.join(cwd_package, relative) if relative else cwd_package
        package_part = package_part.strip("/")
    if package_part == "..." or package_part.endswith("/..."):
        root = package_part[: -len("...")].rstrip("/")
        if sep and name not in _ALL_NAMES:
            raise LabelError(f"'{original}': a recursive pattern can only be followed by ':all'")
        return TargetPattern(
            PatternKind.RECURSIVE, check_package(root, original), None, negative, original, name in _FILE_WILDCARDS
        )
    check_package(package_part, original)
    if sep and name in _ALL_NAMES:
        return TargetPattern(PatternKind.PACKAGE, package_part, None, negative, original, name in _FILE_WILDCARDS)
    if not sep:
        if package_part == "":
            raise LabelError(f"'{original}' names no target", hint="write '//:name', '//:all' or '//...'")
        name = package_part.rsplit("/", 1)[-1]
    return TargetPattern(PatternKind.TARGET, package_part, check_name(name, original), negative, original)
