"""HTML building blocks shared by the report's pages and a rule's own report section
(`ReportSection`): numbers, table cells, tables and inline images, so that a rule's section
reads like the rest of the report. Rules may import this; they may not import the report.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Any

_MIME = {".png": "image/png", ".svg": "image/svg+xml"}


def number(value: Any) -> str:
    """Plain text (not escaped): ints with separators, floats to 4 significant digits."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.4g}"


def cell(value: Any) -> str:
    """A table cell: a number right-aligned and sorted by its value, anything else as text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'<td class="num" data-sort="{value}">{number(value)}</td>'
    return f"<td>{escape('' if value is None else str(value))}</td>"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], table_id: str = "", sortable: bool = False) -> str:
    """A table of rows of cells (each already HTML), scrolling sideways when wide."""
    attributes = (f' id="{table_id}"' if table_id else "") + (' class="sortable"' if sortable else "")
    head = "".join(f"<th>{escape(header)}</th>" for header in headers)
    body = "\n".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return (
        f'<div class="scroll"><table{attributes}><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table></div>'
    )


def image(path: str, data: bytes) -> str:
    """An image among a step's outputs (png or svg), inline as a data: URI, captioned by its path."""
    mime = _MIME[Path(path).suffix]
    encoded = base64.b64encode(data).decode()
    return (
        f'<figure><img class="plot" alt="{escape(path)}" src="data:{mime};base64,{encoded}">'
        f'<figcaption class="meta">{escape(path)}</figcaption></figure>'
    )
