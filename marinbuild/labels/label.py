"""Labels: the names of targets, as in Bazel (`//experiments/delphi:train_1e19`).

A label is a value (frozen, hashable) made of a package path and a target name. Parsing
is strict: labels end up in store records and query output, so a typo like `//a/../b`
or `//a:` is rejected where it is written, not discovered later as a missing target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from marinbuild.errors import LabelError

_PACKAGE_COMPONENT = re.compile(r"[A-Za-z0-9_\-.+]+")
_NAME_COMPONENT = re.compile(r"[A-Za-z0-9_\-.+=,@~#]+")


@dataclass(frozen=True, order=True)
class Label:
    """`//package:name`. The root package is the empty string (`//:name`)."""

    package: str
    name: str

    def __str__(self) -> str:
        return f"//{self.package}:{self.name}"

    def sibling(self, name: str) -> Label:
        return Label(self.package, name)


def _check_parts(value: str, component: re.Pattern[str], what: str, text: str, hint: str) -> str:
    """Reject empty, '.', '..' and badly spelled '/'-separated parts of a package or name."""
    for part in value.split("/"):
        if part in ("", ".", "..") or not component.fullmatch(part):
            raise LabelError(f"invalid {what} '{value}' in '{text}'", hint=hint)
    return value


def check_package(package: str, text: str) -> str:
    """Return `package` if it is a valid package path, else raise naming `text`."""
    if package == "":
        return package
    hint = "package paths are '/'-separated directory names, without '.', '..' or empty parts"
    return _check_parts(package, _PACKAGE_COMPONENT, "package path", text, hint)


def check_name(name: str, text: str) -> str:
    """Return `name` if it is a valid target name, else raise naming `text`."""
    if name == "":
        raise LabelError(f"empty target name in '{text}'")
    hint = "names use letters, digits and _-.+=,@~# separated by '/', without '.', '..' or empty parts"
    return _check_parts(name, _NAME_COMPONENT, "target name", text, hint)


def parse_label(text: str, current_package: str | None = None) -> Label:
    """Parse a label as written in a BUILD file.

    `//pkg:name` and `//pkg` (short for `//pkg:<last component>`) are absolute; `:name`
    and `name` are relative to `current_package`, which is required for them.
    """
    if not isinstance(text, str):
        raise LabelError(f"expected a label string, got {type(text).__name__} {text!r}")
    if text.startswith("//"):
        body = text[2:]
        package, sep, name = body.partition(":")
        check_package(package, text)
        if not sep:
            if package == "":
                raise LabelError(f"'{text}' names no target", hint="write '//:name' for a target of the root package")
            name = package.rsplit("/", 1)[-1]
        return Label(package, check_name(name, text))
    if current_package is None:
        raise LabelError(f"'{text}' is relative but no package is known", hint="write an absolute label '//pkg:name'")
    name = text[1:] if text.startswith(":") else text
    if ":" in name:
        raise LabelError(f"invalid label '{text}'", hint="a relative label is ':name' or 'name'")
    return Label(current_package, check_name(name, text))
