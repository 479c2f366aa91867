"""The tokens of the query language, as in Bazel, each with the column it starts at.

Words are target patterns, regular expressions, attribute names and numbers. Unquoted,
they use letters, digits and `*/@.-_:$~[]`, and may not start with `-` or `*`; anything
else (a regex with spaces, a name with `+` or `=`) is quoted with `'` or `"`. A quoted
keyword is a plain word. Columns are kept so that every error can point at its token.
"""

from __future__ import annotations

import enum
import string
from dataclasses import dataclass

from marinbuild.errors import QueryError

_WORD_CHARACTERS = frozenset(string.ascii_letters + string.digits + "*/@.-_:$~[]")
_OPERATORS = {"+": "union", "^": "intersect", "-": "except"}
_OPERATOR_KEYWORDS = frozenset(_OPERATORS.values())
_KEYWORDS = frozenset({"let", "in", "set"})
_PUNCTUATION = frozenset("(),=")


class TokenKind(enum.Enum):
    WORD = "word"
    KEYWORD = "keyword"  # let, in, set
    OPERATOR = "operator"  # text is the operator's name: intersect, union or except
    PUNCTUATION = "punctuation"  # ( ) , =
    END = "end"


@dataclass(frozen=True)
class Token:
    kind: TokenKind
    text: str
    column: int  # 1-based
    quoted: bool = False

    def describe(self) -> str:
        """How the token reads in an error message."""
        if self.kind is TokenKind.END:
            return "the end of the query"
        return f"'{self.text}'"


def tokenize(expression: str) -> list[Token]:
    """The tokens of `expression`, ending with an END token one column past its end."""
    tokens: list[Token] = []
    index = 0
    while index < len(expression):
        char = expression[index]
        column = index + 1
        if char.isspace():
            index += 1
        elif char in _PUNCTUATION:
            tokens.append(Token(TokenKind.PUNCTUATION, char, column))
            index += 1
        elif char in _OPERATORS:
            tokens.append(Token(TokenKind.OPERATOR, _OPERATORS[char], column))
            index += 1
        elif char in "'\"":
            end = expression.find(char, index + 1)
            if end < 0:
                raise QueryError("unclosed quotation", expression=expression, column=column)
            tokens.append(Token(TokenKind.WORD, expression[index + 1 : end], column, quoted=True))
            index = end + 1
        elif char in _WORD_CHARACTERS and char != "*":
            end = index
            while end < len(expression) and expression[end] in _WORD_CHARACTERS:
                end += 1
            tokens.append(_word(expression[index:end], column))
            index = end
        else:
            raise QueryError(
                f"unexpected character '{char}'",
                expression=expression,
                column=column,
                hint="quote words that contain other characters than letters, digits and */@.-_:$~[]",
            )
    tokens.append(Token(TokenKind.END, "", len(expression) + 1))
    return tokens


def _word(text: str, column: int) -> Token:
    if text in _OPERATOR_KEYWORDS:
        return Token(TokenKind.OPERATOR, text, column)
    if text in _KEYWORDS:
        return Token(TokenKind.KEYWORD, text, column)
    return Token(TokenKind.WORD, text, column)
