"""`genrule`: a shell command from input files to declared output files, as in Bazel.

It is the generic step (and what the benchmarks use). The command runs in bash with
`set -euo pipefail`, in an empty working directory, with Make-style variables expanded:
`$(SRCS)`, `$(OUTS)`, `$@`, `$<`, `$(location L)`, `$(locations L)`, `$(RULEDIR)`, `$$`.
"""

from __future__ import annotations

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


def _run(ctx: Context) -> None:
    for out in ctx.attrs["outs"]:
        (ctx.out / out).parent.mkdir(parents=True, exist_ok=True)
    script = expand_command(ctx)
    ctx.log.info("$ %s", script)
    with (
        open(ctx.log_path, "ab") as log,
        ctx.processes.popen(
            ["bash", "-c", "set -euo pipefail\n" + script],
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
