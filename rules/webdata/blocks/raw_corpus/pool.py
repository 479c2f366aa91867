"""The text pages are drawn from: the reference documentation shipped in the standard
library (`pydoc_data.topics`), the docstrings and source of its modules, and humanize's
translated phrases, each read from files every machine with the project has."""

from __future__ import annotations

import ast
import re
import sysconfig
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from rules.common.stdlib import stdlib_files

MIN_PARAGRAPH_WORDS = 15  # shorter docstring paragraphs are signatures and one-liners, not prose


@dataclass(frozen=True)
class Passage:
    """A paragraph of prose, or a block of code, and the module or topic it came from."""

    source: str
    text: str
    code: bool = False


def _paragraphs(text: str) -> Iterator[str]:
    """Prose paragraphs of a docstring or doc topic, each unwrapped to one line.

    Indented blocks (grammar, examples), doctests and underlines of headings are left out.
    """
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        if not lines or any(line.startswith((" ", "\t", ">>>")) for line in lines):
            continue
        if re.fullmatch(r"[*=\-~^]+", lines[-1].strip()):
            continue
        paragraph = " ".join(line.strip() for line in lines)
        if len(paragraph.split()) >= MIN_PARAGRAPH_WORDS:
            yield paragraph


def _stdlib_passages(path: Path, name: str) -> Iterator[Passage]:
    """The docstring paragraphs of a module, and the source of its documented functions."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return
    lines = source.splitlines(keepends=True)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        docstring = ast.get_docstring(node)
        for paragraph in _paragraphs(docstring or ""):
            yield Passage(name, paragraph)
        if isinstance(node, ast.FunctionDef) and docstring and 5 <= node.end_lineno - node.lineno <= 40:
            yield Passage(name, textwrap.dedent("".join(lines[node.lineno - 1 : node.end_lineno])), code=True)


@dataclass(frozen=True)
class Pool:
    """The distinct passages pages are drawn from, in a fixed order."""

    prose: tuple[Passage, ...]
    code: tuple[Passage, ...]
    translations: tuple[tuple[str, tuple[str, ...]], ...]  # (locale, phrases), sorted by locale

    @classmethod
    def load(cls, stdlib_modules: int | None) -> Pool:
        """The docs topics, then the first `stdlib_modules` stdlib modules (sorted paths).

        Passages met twice (docstrings copied between modules) are kept once, so no two
        originals share text by accident and the ground truth's copies are the only ones.
        """
        from pydoc_data.topics import topics

        passages = [
            Passage(f"reference: {name}", text) for name in sorted(topics) for text in _paragraphs(topics[name])
        ]
        root = Path(sysconfig.get_paths()["stdlib"])
        for path in stdlib_files(root)[:stdlib_modules]:
            module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            passages.extend(_stdlib_passages(path, module))
        seen: set[str] = set()
        distinct = [p for p in passages if not (p.text in seen or seen.add(p.text))]
        return cls(
            prose=tuple(p for p in distinct if not p.code),
            code=tuple(p for p in distinct if p.code),
            translations=translations(),
        )


def pool_sources(stdlib_modules: int | None) -> dict[str, Path]:
    """Every file `Pool.load(stdlib_modules)` reads, by a name that does not depend on where
    Python is installed: a step's external inputs, so its key follows their content."""
    from pydoc_data import topics

    root = Path(sysconfig.get_paths()["stdlib"])
    found = {path.relative_to(root).as_posix(): path for path in stdlib_files(root)[:stdlib_modules]}
    found["pydoc_data/topics.py"] = Path(topics.__file__)
    return {**found, **humanize_catalogs()}


def humanize_catalogs() -> dict[str, Path]:
    """humanize's message catalogs, by locale order: `humanize/<locale>/humanize.po`."""
    catalogs = sorted(Path(str(resources.files("humanize") / "locale")).glob("*/LC_MESSAGES/humanize.po"))
    return {f"humanize/{catalog.parent.parent.name}/{catalog.name}": catalog for catalog in catalogs}


def translations() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """humanize's translated phrases by locale (the msgstr lines of its .po catalogs)."""
    found = []
    for catalog in humanize_catalogs().values():
        phrases = []
        for line in catalog.read_text(encoding="utf-8").splitlines():
            quoted = re.fullmatch(r'msgstr(?:\[\d+\])? (".*")', line)
            if quoted and (phrase := ast.literal_eval(quoted.group(1)).strip()):
                phrases.append(phrase)
        if phrases:
            found.append((catalog.parent.parent.name, tuple(dict.fromkeys(phrases))))
    return tuple(found)
