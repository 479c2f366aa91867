"""The running interpreter's standard library as the input of a step (python_corpus,
chat_data, synthetic_web_pages): corpora every machine has, offline.

Its files are the steps' external inputs, so a key follows their content; a rule whose
output depends on the interpreter also holds its version (`PYTHON_VERSION`, set by
marinbuild), and its step checks it runs on that interpreter.
"""

from __future__ import annotations

import functools
import os
import platform
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.context import Context, StepFailed

RUNNING_PYTHON = f"{platform.python_implementation()} {platform.python_version()}"
PYTHON_VERSION = Attr(types.STRING, default=RUNNING_PYTHON, doc="Set by marinbuild; part of the key.")
_SKIPPED_DIRECTORIES = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}


@functools.cache
def stdlib_files(root: Path) -> tuple[Path, ...]:
    """The standard library's .py files, tests skipped, in a stable order.

    Planning asks for them for every target that reads the standard library, so they are
    listed once a process, and the skipped directories are never entered: a walk through
    site-packages made a no-op build of experiments/datamix spend ten seconds here."""
    found = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [name for name in subdirectories if name not in _SKIPPED_DIRECTORIES]
        found += [Path(directory, name) for name in files if name.endswith(".py") and not name.startswith("test_")]
    return tuple(sorted(found))


def stdlib_inputs(_attrs: Mapping[str, JsonValue]) -> dict[str, Path]:
    """The standard library's files by their path in it: the external inputs of the rules
    that read it, in the order they read them."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return {path.relative_to(root).as_posix(): path for path in stdlib_files(root)}


def check_python_version(attrs: Mapping[str, JsonValue]) -> None:
    """At load: PYTHON_VERSION was left to marinbuild (a ValueError names the BUILD line)."""
    if attrs["python_version"] != RUNNING_PYTHON:
        raise ValueError(
            f"python_version is set by marinbuild to the running interpreter ({RUNNING_PYTHON}); leave it out"
        )


def check_running_python(ctx: Context) -> None:
    """In the step: the interpreter running it is the one its key names."""
    if ctx.attrs["python_version"] != RUNNING_PYTHON:
        raise StepFailed(f"this step runs on {RUNNING_PYTHON}, but its key says {ctx.attrs['python_version']}")
