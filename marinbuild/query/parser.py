"""Parsing a query into its syntax tree, with Bazel's grammar:

    expr ::= word
           | let name = expr in expr
           | (expr)
           | expr intersect expr | expr ^ expr
           | expr union expr     | expr + expr
           | expr except expr    | expr - expr
           | set(word *)
           | word '(' int | word | expr ... ')'

The three set operators have equal precedence and associate to the left. A function's
arguments are read by the kinds its signature lists, so `kind(genrule, x)` takes
`genrule` as a regex, not a target. Variables must be bound where they are used, so a
typo in `$name` is an error at its column rather than an empty result.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from marinbuild.errors import QueryError, did_you_mean
from marinbuild.query.expressions import (
    Expression,
    FunctionCall,
    Let,
    SetLiteral,
    SetOperation,
    TargetLiteral,
    Variable,
    Word,
)
from marinbuild.query.functions import SIGNATURES, Arg
from marinbuild.query.lexer import Token, TokenKind, tokenize

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse(expression: str) -> Expression:
    return _Parser(expression).parse()


def from_command_line(words: Sequence[str]) -> str:
    """The query the words typed after `marinbuild query` stand for.

    `marinbuild query deps //x:y //x:z` is how people type `deps(//x:y + //x:z)`; any
    other sequence of words is one expression split by the shell, as in Bazel.
    """
    first, *rest = words
    signature = SIGNATURES.get(first)
    if rest and signature is not None and signature.takes_one_expression and not rest[0].startswith("("):
        return f"{first}({' + '.join(_quoted(word) for word in rest)})"
    return " ".join(words)


def _quoted(word: str) -> str:
    return f"'{word}'" if '"' in word else f'"{word}"'


class _Parser:
    def __init__(self, expression: str):
        self.expression = expression
        self.tokens = tokenize(expression)
        self.position = 0
        self.bound: list[str] = []  # variables of the enclosing lets, innermost last

    def parse(self) -> Expression:
        result = self._expression()
        if self._peek().kind is not TokenKind.END:
            raise self._error(f"unexpected {self._peek().describe()} after a complete expression", self._peek())
        return result

    # -- tokens -------------------------------------------------------------------------

    def _peek(self) -> Token:
        return self.tokens[self.position]

    def _next(self) -> Token:
        token = self.tokens[self.position]
        if token.kind is not TokenKind.END:
            self.position += 1
        return token

    def _is(self, kind: TokenKind, text: str) -> bool:
        token = self._peek()
        return token.kind is kind and token.text == text

    def _expect(self, kind: TokenKind, text: str, context: str) -> Token:
        token = self._next()
        if token.kind is not kind or token.text != text:
            raise self._error(f"expected '{text}' {context}, got {token.describe()}", token)
        return token

    def _error(self, message: str, token: Token, hint: str | None = None) -> QueryError:
        return QueryError(message, expression=self.expression, column=token.column, hint=hint)

    # -- grammar ------------------------------------------------------------------------

    def _expression(self) -> Expression:
        left = self._primary()
        while self._peek().kind is TokenKind.OPERATOR:
            operator = self._next()
            left = SetOperation(operator.text, left, self._primary(), operator.column)
        return left

    def _primary(self) -> Expression:
        token = self._next()
        if token.kind is TokenKind.WORD:
            if self._is(TokenKind.PUNCTUATION, "("):
                return self._call(token)
            if token.text.startswith("$") and not token.quoted:
                return self._variable(token)
            return TargetLiteral(token.text, token.column)
        if token.kind is TokenKind.KEYWORD and token.text == "let":
            return self._let(token)
        if token.kind is TokenKind.KEYWORD and token.text == "set":
            return self._set(token)
        if token.kind is TokenKind.PUNCTUATION and token.text == "(":
            inner = self._expression()
            self._expect(TokenKind.PUNCTUATION, ")", f"to close the '(' at column {token.column}")
            return inner
        raise self._error(f"expected an expression, got {token.describe()}", token)

    def _variable(self, token: Token) -> Variable:
        name = token.text[1:]
        if not _IDENTIFIER.fullmatch(name):
            raise self._error(f"'{token.text}' is not a variable name", token)
        if name not in self.bound:
            raise self._error(f"undefined variable '${name}'", token, hint=did_you_mean(name, self.bound))
        return Variable(name, token.column)

    def _let(self, let: Token) -> Let:
        name = self._next()
        if name.kind is not TokenKind.WORD or name.quoted or not _IDENTIFIER.fullmatch(name.text):
            raise self._error(f"expected a variable name after 'let', got {name.describe()}", name)
        self._expect(TokenKind.PUNCTUATION, "=", f"after 'let {name.text}'")
        value = self._expression()
        self._expect(TokenKind.KEYWORD, "in", f"after the value of '{name.text}'")
        self.bound.append(name.text)
        try:
            body = self._expression()
        finally:
            self.bound.pop()
        return Let(name.text, value, body, let.column)

    def _set(self, keyword: Token) -> SetLiteral:
        self._expect(TokenKind.PUNCTUATION, "(", "after 'set'")
        items: list[TargetLiteral] = []
        while self._peek().kind is TokenKind.WORD:
            word = self._next()
            items.append(TargetLiteral(word.text, word.column))
        self._expect(TokenKind.PUNCTUATION, ")", "to close set(, which takes target patterns separated by spaces")
        return SetLiteral(tuple(items), keyword.column)

    def _call(self, name: Token) -> FunctionCall:
        signature = SIGNATURES.get(name.text)
        if signature is None:
            hint = did_you_mean(name.text, SIGNATURES) or f"functions: {', '.join(sorted(SIGNATURES))}"
            raise self._error(f"unknown function '{name.text}'", name, hint=hint)
        self._next()  # (
        args: list[Expression | Word | int] = []
        for index, kind in enumerate(signature.args):
            if index > 0:
                if index >= signature.required and not self._is(TokenKind.PUNCTUATION, ","):
                    break
                self._expect(
                    TokenKind.PUNCTUATION,
                    ",",
                    f"between the arguments of {name.text}() ({_arity(signature.required, len(signature.args))})",
                )
            args.append(self._argument(kind, name.text))
        self._expect(
            TokenKind.PUNCTUATION, ")", f"to close {name.text}( ({_arity(signature.required, len(signature.args))})"
        )
        return FunctionCall(name.text, tuple(args), name.column)

    def _argument(self, kind: Arg, function: str) -> Expression | Word | int:
        if kind is Arg.EXPRESSION:
            return self._expression()
        token = self._next()
        if kind is Arg.WORD:
            if token.kind is not TokenKind.WORD:
                raise self._error(f"{function}() expects a word here, got {token.describe()}", token, hint="quote it")
            return Word(token.text, token.column)
        if token.kind is not TokenKind.WORD or not token.text.isdigit():
            raise self._error(f"{function}() expects a non-negative integer here, got {token.describe()}", token)
        return int(token.text)


def _arity(required: int, most: int) -> str:
    if required == most:
        return f"it takes {required} argument{'s' if required > 1 else ''}"
    return f"it takes {required} to {most} arguments"
