"""A step's headline, the line `build` prints under an output: made from a JSON file of it.

Every headline reads one small JSON file of the output (a summary, metrics); an output
whose file cannot be read has none rather than failing the build that names it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def json_headline(path: Path, describe: Callable[[Any], str | None]) -> str | None:
    """`describe` of the JSON value in `path`; None when the file cannot be read."""
    try:
        values = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return describe(values)


class _Shown(dict):
    """Values for a headline template: numbers to 3 decimals, '?' for what is missing."""

    def __missing__(self, key: str) -> str:
        return "?"


def summary_headline(path: Path, template: str) -> str | None:
    """`template` filled with the values of the JSON object in `path`."""
    return json_headline(
        path,
        lambda values: template.format_map(
            _Shown({key: f"{value:.3f}" if isinstance(value, float) else value for key, value in values.items()})
        ),
    )
