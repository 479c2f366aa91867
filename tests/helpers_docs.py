"""The command lines the docs show, parsed from README.md and docs/, for the tests that run
them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

SHELL_FENCES = {"", "bash", "sh", "shell", "console", "text"}

OPERATORS = {"&&", "||", ";", "|"}

PLACEHOLDER = re.compile(r"([A-Z][A-Z_]*)(\.\.\.)?")

PLACEHOLDERS = {  # a sample value for each placeholder of the synopses
    "PATTERN": "//experiments/hello:all",
    "LABEL": "//experiments/hello:report",
    "KEY": "ea933802e095",
    "EXPR": "deps(//experiments/hello:all)",
    "FORMAT": "label",
    "N": "2",
    "W": "2",  # a worker count (docs/benchmarks.md, the data benchmark)
    "S": "30",
    "URL": "gs://team-bucket/mb",
    "DIR": "out",
    "FILE": "events.jsonl",
    "ADDRESS": "auto",
    "METRIC": "eval.loss",
}


@dataclass(frozen=True)
class DocCommand:
    """One command line of the docs, as argv after `marinbuild`."""

    file: str
    line: int
    text: str  # as the doc shows it
    args: tuple[str, ...]
    inline: bool  # an inline code span in prose, not a fenced block

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def _fenced_shell_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, logical line) of the shell blocks, continuations joined."""
    fence: str | None = None
    pending: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            if pending is not None:
                yield pending
                pending = None
            fence = stripped[3:].strip().lower() if fence is None else None
            continue
        if fence not in SHELL_FENCES:
            continue
        if pending is not None and (pending[1].endswith("\\") or (line[:1].isspace() and stripped.startswith("["))):
            pending = (pending[0], pending[1].removesuffix("\\").rstrip() + " " + stripped)
            continue
        if pending is not None:
            yield pending
        pending = (number, stripped)
    if pending is not None:
        yield pending


def _inline_spans(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of the prose's inline code spans that start with `marinbuild `."""
    prose, fence = [], False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fence = not fence
        prose.append("" if fence or line.strip().startswith("```") else line)
    joined = "\n".join(prose)
    for match in re.finditer(r"`([^`]+)`", joined):
        if match.group(1).startswith("marinbuild "):
            yield joined.count("\n", 0, match.start()) + 1, " ".join(match.group(1).split())


def _invocations(line: str) -> list[list[str]]:
    """The argv (after the program) of each simple command of `line` that runs marinbuild."""
    try:
        words = shlex.split(line.removeprefix("$ "), comments=True)
    except ValueError:  # not shell (unbalanced quotes): no command line
        return []
    commands: list[list[str]] = [[]]
    for word in words:
        if word in OPERATORS:
            commands.append([])
        else:
            commands[-1].append(word)
    found = []
    for command in commands:
        redirection = next((i for i, word in enumerate(command) if re.match(r"\d?[<>]", word)), len(command))
        command = command[:redirection]
        if command and Path(command[0]).name == "marinbuild":
            found.append(command[1:])
    return found


def _is_synopsis(args: list[str]) -> bool:
    return any("[" in arg or "]" in arg or PLACEHOLDER.fullmatch(arg) or "|" in arg for arg in args)


def _sample(word: str) -> str:
    match = PLACEHOLDER.fullmatch(word)
    if match is None:
        return word
    assert match.group(1) in PLACEHOLDERS, f"the placeholder {word} needs a sample value in PLACEHOLDERS"
    return PLACEHOLDERS[match.group(1)]


def _concrete(args: list[str]) -> list[list[str]]:
    """The command lines a synopsis stands for: every optional part in, each alternative in turn."""
    words = [bare for arg in args if (bare := arg.replace("[", "").replace("]", ""))]
    choices = [word.split("|") for word in words]
    first = [alternatives[0] for alternatives in choices]
    lines = [first]
    for index, alternatives in enumerate(choices):
        lines += [[*first[:index], other, *first[index + 1 :]] for other in alternatives[1:]]
    return [[_sample(word) for word in line] for line in lines]


def doc_commands() -> list[DocCommand]:
    commands = []
    for path in DOCS:
        text, name = path.read_text(), path.relative_to(ROOT).as_posix()
        for inline, lines in ((False, _fenced_shell_lines(text)), (True, _inline_spans(text))):
            for number, line in lines:
                for args in _invocations(line):
                    concrete = _concrete(args) if _is_synopsis(args) else [args]
                    commands += [DocCommand(name, number, line, tuple(each), inline) for each in concrete]
    return commands


DOC_COMMANDS = doc_commands()
