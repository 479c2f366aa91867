"""`chat_data`'s step: a small chat set made offline from the docstrings of the running
interpreter's standard library, parsed with `ast` (nothing is imported or run), so the
fine-tuning example and tests need no network. Each public function or class of a public
module is a conversation, "What does the function json.dumps do?" answered by the first
paragraph of its docstring; a class's conversation goes on to a few of its methods
("And its method JSONEncoder.encode?"), so the set holds multi-turn chats too."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator

from marinbuild.targets.context import Context
from rules.common.corpus import corpus_from
from rules.common.stdlib import RUNNING_PYTHON, check_running_python, stdlib_inputs
from rules.posttrain.constants import ASSISTANT, MESSAGES, SHORTENED

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def module_name(path: str) -> str | None:
    """The module a standard library file defines ("json/decoder.py": "json.decoder"), or
    None for a private one (a part starting with "_": `_pydecimal`, `__main__`)."""
    parts = path.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return None if any(part.startswith("_") for part in parts) else ".".join(parts)


def _answer(node: ast.AST, characters: int) -> str | None:
    """The first paragraph of a definition's docstring on one line, shortened at a word to
    at most `characters`; None without one."""
    docstring = ast.get_docstring(node)  # type: ignore[arg-type]
    paragraph = " ".join((docstring or "").strip().split("\n\n")[0].split())
    return textwrap.shorten(paragraph, width=characters, placeholder=SHORTENED) if paragraph else None


def _documented(body: list[ast.stmt], characters: int) -> Iterator[tuple[ast.AST, str, str]]:
    """The public definitions of a module or class body that have a docstring: (node, its
    kind, its answer)."""
    for node in body:
        if isinstance(node, _DEFINITIONS) and not node.name.startswith("_"):
            answer = _answer(node, characters)
            if answer is not None:
                yield node, "class" if isinstance(node, ast.ClassDef) else "function", answer


def conversations(module: str, source: str, characters: int, follow_ups: int) -> Iterator[list[dict[str, str]]]:
    """The conversations about one module's documented public functions and classes."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # a file of the library that is not Python (test data)
        return
    for node, kind, answer in _documented(tree.body, characters):
        messages = [
            {"role": "user", "content": f"What does the {kind} {module}.{node.name} do?"},  # type: ignore[attr-defined]
            {"role": ASSISTANT, "content": answer},
        ]
        if isinstance(node, ast.ClassDef):
            methods = [item for item in _documented(node.body, characters) if item[1] == "function"]
            for method, _kind, method_answer in methods[:follow_ups]:
                question = f"And its method {node.name}.{method.name}?"  # type: ignore[attr-defined]
                messages += [{"role": "user", "content": question}, {"role": ASSISTANT, "content": method_answer}]
        yield messages


def chat_data(ctx: Context) -> None:
    check_running_python(ctx)
    attrs = ctx.attrs
    system = [] if attrs["system"] is None else [{"role": "system", "content": attrs["system"]}]

    def chats() -> Iterator[list[dict[str, str]]]:
        for path, file in stdlib_inputs(attrs).items():
            module = module_name(path)
            if module is not None:
                source = file.read_bytes().decode("utf-8", errors="replace")
                for messages in conversations(module, source, attrs["answer_characters"], attrs["follow_ups"]):
                    yield system + messages

    source = {"python": RUNNING_PYTHON, "from": "docstrings of the standard library"}
    corpus_from(ctx, chats(), source, field=MESSAGES)
