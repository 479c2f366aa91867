"""Chat data: the format `sft_lm` fine-tunes on, and `chat_data`, a small chat set made offline.

A chat set has the layout of every data rule (`rules/corpus_shards.py`): `train/` and
`validation/` JSONL shards and `summary.json`, but a line holds a conversation,
`{"messages": [{"role": "user", "content": "..."}, {"role": "assistant", ...}, ...]}`
(roles `system`, `user`, `assistant`), as Levanter's chat datasets and Hugging Face chat
templates take it. Any target with such lines is a chat set; `chat_problem` says what is
wrong with a line that is not one.

`chat_data` makes one from what every machine with marinbuild has, so the fine-tuning
example and tests need no network: the docstrings of the running interpreter's standard
library, parsed with `ast` (nothing is imported or run). Each public function or class of a
public module is a conversation, "What does the function json.dumps do?" answered by the
first paragraph of its docstring; a class's conversation goes on to a few of its methods
("And its method JSONEncoder.encode?"), so the set holds multi-turn chats too.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator, Mapping
from typing import Any

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.context import Context
from marinbuild.targets.rule import Execution, Rule
from rules.corpus_shards import CORPUS_ATTRS, check_corpus_attrs, write_corpus
from rules.data import PYTHON_VERSION, RUNNING_PYTHON, check_python_version, check_running_python, stdlib_inputs

MESSAGES = "messages"
ROLES = ("system", "user", "assistant")
ASSISTANT = "assistant"
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_SHORTENED = " ..."


def chat_problem(record: Any) -> str | None:
    """Why a line's record is not a conversation sft_lm can learn from, or None."""
    messages = record.get(MESSAGES) if isinstance(record, dict) else None
    if not isinstance(messages, list):
        return 'no "messages" list (a chat line is {"messages": [{"role": "user", "content": "..."}, ...]})'
    for index, message in enumerate(messages):
        if not (isinstance(message, dict) and message.get("role") in ROLES and isinstance(message.get("content"), str)):
            shown = repr(message)[:80]
            return f'message {index} is not {{"role": "system"|"user"|"assistant", "content": <a string>}}: {shown}'
    if not any(message["role"] == ASSISTANT and message["content"] for message in messages):
        return "no assistant message with content: nothing to learn from"
    return None


# -- chat_data ------------------------------------------------------------------------------


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
    return textwrap.shorten(paragraph, width=characters, placeholder=_SHORTENED) if paragraph else None


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


def _chat_data(ctx: Context) -> None:
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
    write_corpus(
        ctx.out,
        chats(),
        sample_count=attrs["sample_count"],
        validation_fraction=attrs["validation_fraction"],
        progress=ctx.progress,
        source=source,
        field=MESSAGES,
    )


def _check_chat_data(attrs: Mapping[str, JsonValue]) -> None:
    check_python_version(attrs)
    if attrs["answer_characters"] < 2 * len(_SHORTENED):
        raise ValueError(f"answer_characters must be at least {2 * len(_SHORTENED)}, got {attrs['answer_characters']}")
    if attrs["follow_ups"] < 0:
        raise ValueError(f"follow_ups must be 0 or more, got {attrs['follow_ups']}")
    check_corpus_attrs(attrs)


chat_data = Rule(
    name="chat_data",
    impl=_chat_data,
    external_inputs=stdlib_inputs,
    execution=Execution.SUBPROCESS,
    validate=_check_chat_data,
    doc=(
        "A chat set made offline from the running interpreter's standard library: a conversation per "
        "documented public function or class ('What does the function json.dumps do?', answered by its "
        "docstring's first paragraph), a class's going on to follow_ups of its methods. Output: train/ "
        "and validation/ JSONL shards of {'messages': [{'role': ..., 'content': ...}, ...]} lines and "
        "summary.json; sft_lm fine-tunes on it."
    ),
    attrs={
        "answer_characters": Attr(
            types.INT, default=300, doc="The longest answer: a docstring's first paragraph, shortened at a word."
        ),
        "follow_ups": Attr(types.INT, default=2, doc="Questions about a class's methods after the class's own."),
        "system": Attr(types.STRING, default=None, doc="A system message that starts every conversation, if any."),
        "python_version": PYTHON_VERSION,
        **CORPUS_ATTRS,
    },
)
