"""The dependency graph as SVG: nodes coloured by status, each a link to its step page.

Graphviz's `dot` lays it out when it is installed; otherwise a layered layout of our own
(columns by dependency depth, rows ordered by the mean row of each node's dependencies,
which keeps most edges short and uncrossed on the graphs experiments have). Either way
the SVG is inline text: the page needs no server and no network.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from marinbuild.report.collect import StepStatus

# Fill and border of each status; the page's legend uses the same.
COLOURS: dict[StepStatus, tuple[str, str]] = {
    StepStatus.CACHED: ("#d4edda", "#2e7d32"),
    StepStatus.MIRRORED: ("#d1ecf1", "#00838f"),
    StepStatus.STALE: ("#fff3cd", "#b8860b"),
    StepStatus.FAILED: ("#f8d7da", "#c62828"),
    StepStatus.RUNNING: ("#cfe2ff", "#1565c0"),
    StepStatus.NEVER_BUILT: ("#eceff1", "#78909c"),
    StepStatus.PINNED: ("#ede7f6", "#5e35b1"),
}

_WIDTH, _HEIGHT = 150, 44  # a node
_GAP_X, _GAP_Y = 40, 18
_MARGIN = 10
_MAX_CHARS = 20
_DOT_TIMEOUT_S = 30


@dataclass(frozen=True)
class Node:
    label: str
    text: str  # what the box says
    detail: str  # the second line: rule kind
    status: StepStatus
    href: str


def render(nodes: Sequence[Node], deps: Mapping[str, Sequence[str]]) -> str:
    """The graph as an <svg> element; `deps` maps a node's label to its dependencies' labels."""
    if shutil.which("dot"):
        drawn = _with_dot(nodes, deps)
        if drawn is not None:
            return drawn
    return _layered(nodes, deps)


def _short(text: str) -> str:
    return text if len(text) <= _MAX_CHARS else text[: _MAX_CHARS - 1] + "…"


def _layered(nodes: Sequence[Node], deps: Mapping[str, Sequence[str]]) -> str:
    depth: dict[str, int] = {}
    for node in nodes:  # dependencies come first
        depth[node.label] = 1 + max((depth[dep] for dep in deps.get(node.label, ()) if dep in depth), default=-1)
    columns: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for node in nodes:
        columns[depth[node.label]].append(node.label)
    row: dict[str, float] = {}
    for column in columns:

        def mean_row(label: str) -> float:
            rows = [row[dep] for dep in deps.get(label, ()) if dep in row]
            return sum(rows) / len(rows) if rows else float(len(row))

        column.sort(key=mean_row)  # stable: ties keep the graph's order
        for index, label in enumerate(column):
            row[label] = index
    position = {
        label: (_MARGIN + x * (_WIDTH + _GAP_X), _MARGIN + y * (_HEIGHT + _GAP_Y))
        for x, column in enumerate(columns)
        for y, label in enumerate(column)
    }
    width = _MARGIN * 2 + len(columns) * (_WIDTH + _GAP_X) - _GAP_X
    height = _MARGIN * 2 + max((len(column) for column in columns), default=0) * (_HEIGHT + _GAP_Y) - _GAP_Y
    parts = [
        f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#607d8b"/></marker></defs>',
    ]
    for node in nodes:
        x2, y2 = position[node.label]
        for dep in deps.get(node.label, ()):
            if dep not in position:
                continue
            x1, y1 = position[dep]
            x1, y1, y2c = x1 + _WIDTH, y1 + _HEIGHT / 2, y2 + _HEIGHT / 2
            bend = (x2 - x1) / 2
            parts.append(
                f'<path class="edge" d="M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2c} {x2},{y2c}" '
                'fill="none" stroke="#90a4ae" stroke-width="1.4" marker-end="url(#arrow)"/>'
            )
    for node in nodes:
        x, y = position[node.label]
        fill, stroke = COLOURS[node.status]
        parts.append(
            f'<a href="{escape(node.href)}">'
            f'<g class="node" data-label="{escape(node.label)}" data-status="{node.status.value}">'
            f"<title>{escape(node.label)} ({node.status.value})</title>"
            f'<rect x="{x}" y="{y}" width="{_WIDTH}" height="{_HEIGHT}" rx="7" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="1.6"/>'
            f'<text x="{x + 10}" y="{y + 18}" font-size="13" font-family="sans-serif" fill="#212121">'
            f"{escape(_short(node.text))}</text>"
            f'<text x="{x + 10}" y="{y + 35}" font-size="11" font-family="sans-serif" fill="#546e7a">'
            f"{escape(_short(node.detail))}</text>"
            "</g></a>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


def _quote(text: str) -> str:
    """A DOT string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _with_dot(nodes: Sequence[Node], deps: Mapping[str, Sequence[str]]) -> str | None:
    """Graphviz's layout, or None if dot fails (the layered layout is then used)."""
    ids = {node.label: f"n{index}" for index, node in enumerate(nodes)}
    lines = [
        "digraph G {",
        'rankdir=LR; bgcolor="transparent";',
        'node [shape=box, style="rounded,filled", fontname="sans-serif", fontsize=12, penwidth=1.6];',
        'edge [color="#90a4ae"];',
    ]
    for node in nodes:
        fill, stroke = COLOURS[node.status]
        lines.append(
            f"{ids[node.label]} [label={_quote(_short(node.text) + chr(10) + node.detail)}, URL={_quote(node.href)}, "
            f"tooltip={_quote(node.label + ' (' + node.status.value + ')')}, "
            f"fillcolor={_quote(fill)}, color={_quote(stroke)}, "
            f"class={_quote('node status-' + node.status.name.lower())}];"
        )
    for node in nodes:
        lines += [f"{ids[dep]} -> {ids[node.label]};" for dep in deps.get(node.label, ()) if dep in ids]
    lines.append("}")
    try:
        done = subprocess.run(
            ["dot", "-Tsvg"], input="\n".join(lines), capture_output=True, text=True, timeout=_DOT_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    start = done.stdout.find("<svg")
    if done.returncode != 0 or start < 0:
        return None
    return done.stdout[start:].replace("<svg", '<svg class="graph"', 1)
