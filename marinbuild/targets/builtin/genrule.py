"""`genrule`: a shell command from input files to declared output files, as in Bazel.

It is the generic step (and what the benchmarks use). The command runs in bash with
`set -euo pipefail`, in an empty working directory, with Make-style variables expanded:
`$(SRCS)`, `$(OUTS)`, `$@`, `$<`, `$(location L)`, `$(locations L)`, `$(RULEDIR)`, `$$`.
A command too long to be an argument reaches bash as a file: a command has no length
limit. Its standard input is empty.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.context import Context, StepFailed
from marinbuild.targets.rule import Rule

# One Make variable: `$$`, `$@`, `$<`, or `$(NAME)` / `$(NAME ARG)`.
_VARIABLE = re.compile(r"\$(\$|@|<|\(([A-Za-z_@][A-Za-z0-9_]*|@D)(?:\s+([^)\s]+))?\s*\))")
_KNOWN = {"SRCS", "OUTS", "RULEDIR", "@D", "location", "locations"}
# A command of this many bytes or more reaches bash as a script file, `_SCRIPT` in the
# step's staging directory: the kernel takes no argument of 128 KiB or more, and 128 KiB
# is also the least it allows for all arguments and the environment together.
_ARGUMENT_BYTES = 64 * 1024
_SCRIPT = "command.sh"


def _check(attrs: Mapping[str, JsonValue]) -> None:
    outs: list[str] = attrs["outs"]
    if not outs:
        raise ValueError("genrule needs at least one entry in 'outs'")
    for out in outs:
        parts = out.split("/")
        if out.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"output '{out}' must be a relative path without '.', '..' or empty parts")
    if len(set(outs)) != len(outs):
        raise ValueError(f"duplicate entries in 'outs': {outs}")
    for match in _VARIABLE.finditer(attrs["cmd"]):
        name, argument = match.group(2), match.group(3)
        if match.group(1) == "@" and len(outs) != 1:
            raise ValueError(f"'$@' needs exactly one output, this genrule declares {len(outs)}; use $(OUTS)")
        if name is None:
            continue
        if name not in _KNOWN:
            raise ValueError(f"unknown variable '$({name})' in cmd; write '$$' for a literal '$' (e.g. '$$(date)')")
        if name.startswith("location"):
            if argument is None:
                raise ValueError(f"'$({name})' needs a label")
            if argument not in attrs["srcs"]:
                raise ValueError(f"'$({name} {argument})': the label must also be listed in srcs")


def expand_command(ctx: Context) -> str:
    """The command with every Make variable replaced by shell-quoted paths."""
    srcs = [path for label in ctx.attrs["srcs"] for path in ctx.files(label)]
    outs = [ctx.out / out for out in ctx.attrs["outs"]]

    def quoted(paths: list[Path]) -> str:
        return " ".join(shlex.quote(str(path)) for path in paths)

    def replace(match: re.Match[str]) -> str:
        symbol, name, argument = match.group(1), match.group(2), match.group(3)
        if symbol == "$":
            return "$"
        if symbol == "@":
            return quoted(outs)
        if symbol == "<":
            if len(srcs) != 1:
                raise StepFailed(f"'$<' needs exactly one input file, srcs provide {len(srcs)}")
            return quoted(srcs)
        if name == "SRCS":
            return quoted(srcs)
        if name == "OUTS":
            return quoted(outs)
        if name in ("RULEDIR", "@D"):
            return quoted([ctx.out])
        if name == "location":
            try:
                return quoted([ctx.location(argument)])
            except ValueError as error:
                raise StepFailed(f"$(location {argument}): {error}; use $(locations ...)") from None
        return quoted(list(ctx.files(argument)))

    return _VARIABLE.sub(replace, ctx.attrs["cmd"])


def _bash(ctx: Context, command: str) -> list[str]:
    """The bash command line that runs `command`. Where it fits, it is `bash -c`'s argument:
    bash then runs the command's last simple command in its own place, as the very process
    the builder started, which the kernel kills along with a builder killed outright
    (context.py). Past that, bash reads it from a script file beside the step's working
    directory, in its staging directory (writable in the sandbox too): as one argument it
    could not start at all, and on standard input the command's own reads would take the
    script's lines. Encoded as an argument is, so a file name that is not UTF-8 reaches bash
    as the bytes it is."""
    script = "set -euo pipefail\n" + command
    encoded = os.fsencode(script)
    if len(encoded) < _ARGUMENT_BYTES:
        return ["bash", "-c", script]
    path = ctx.tmp.parent / _SCRIPT
    path.write_bytes(encoded)
    return ["bash", str(path)]


def _run(ctx: Context) -> None:
    for out in ctx.attrs["outs"]:
        (ctx.out / out).parent.mkdir(parents=True, exist_ok=True)
    command = expand_command(ctx)
    ctx.log.info("$ %s", command)
    with (
        open(ctx.log_path, "ab") as log,
        ctx.processes.popen(
            _bash(ctx, command),
            cwd=ctx.tmp,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            extra_env={"RULEDIR": str(ctx.out)},
        ) as process,
    ):
        returncode = ctx.processes.exit_status(process.wait())
    if returncode != 0:
        raise StepFailed(f"command exited with status {returncode}", returncode)
    missing = [out for out in ctx.attrs["outs"] if not (ctx.out / out).is_file()]
    if missing:
        raise StepFailed(f"declared outputs were not created: {', '.join(missing)}")
    declared = {str(Path(out)) for out in ctx.attrs["outs"]}
    extra = sorted(
        str(path.relative_to(ctx.out))
        for path in ctx.out.rglob("*")
        if path.is_file() and str(path.relative_to(ctx.out)) not in declared
    )
    if extra:
        raise StepFailed(f"the command wrote undeclared outputs: {', '.join(extra)}; list them in outs")


genrule = Rule(
    name="genrule",
    impl=_run,
    doc="Run a bash command from input files (srcs) to declared output files (outs).",
    attrs={
        "srcs": Attr(types.LABEL_LIST, default=[], doc="Source files or targets the command reads."),
        "outs": Attr(types.STRING_LIST, doc="Files the command writes, relative to its output directory."),
        "cmd": Attr(types.TEMPLATE, doc="bash command with Make variables."),
    },
    validate=_check,
)
