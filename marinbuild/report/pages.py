"""The report's HTML: an index page (index_page.py) and one page per step (step_page.py),
each a self-contained file.

Styles, the table-sorting script, the graph and the curves are inline; images are data:
URIs. A report directory can be copied anywhere (a bucket, a laptop) and opened offline.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from marinbuild.report.blocks import STEPS_DIR, step_file
from marinbuild.report.collect import Report
from marinbuild.report.index_page import index_page
from marinbuild.report.step_page import step_page

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 1280px; padding: 1em 2em; color: #212121; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #cfd8dc; padding-bottom: .2em; margin-top: 1.6em; }
a { color: #1565c0; text-decoration: none; } a:hover { text-decoration: underline; }
table { border-collapse: collapse; font-size: .9em; } \
th, td { border: 1px solid #cfd8dc; padding: .3em .6em; text-align: left; }
th { background: #eceff1; } table.sortable th { cursor: pointer; user-select: none; }
th[data-order=asc]::after { content: " \\25B2"; } th[data-order=desc]::after { content: " \\25BC"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f5f5f5; border: 1px solid #e0e0e0; padding: .6em; \
overflow: auto; max-height: 32em; font-size: .85em; }
.badge { display: inline-block; padding: .1em .5em; border-radius: .8em; \
border: 1px solid; font-size: .85em; white-space: nowrap; }
.meta { color: #546e7a; font-size: .9em; }
.scroll { overflow-x: auto; max-width: 100%; }
.failure { border: 2px solid #c62828; background: #fff5f5; padding: .2em 1em 1em; border-radius: .4em; }
.legend span { margin-right: 1em; }
img.plot { max-width: min(100%, 900px); height: auto; } figure svg { max-width: 100%; height: auto; }
details.attempt { margin: .5em 0; } details.attempt > summary { cursor: pointer; }
"""

_SORT_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(th => th.addEventListener("click", () => {
  const table = th.closest("table"), body = table.tBodies[0], column = th.cellIndex;
  const ascending = th.dataset.order !== "asc";
  table.querySelectorAll("th").forEach(other => delete other.dataset.order);
  th.dataset.order = ascending ? "asc" : "desc";
  const value = row => {
    const cell = row.cells[column], raw = cell.dataset.sort ?? cell.textContent.trim(), number = Number(raw);
    return raw !== "" && !isNaN(number) ? number : raw;
  };
  const compare = (a, b) => typeof a === typeof b ? (a < b ? -1 : a > b ? 1 : 0) \
: (typeof a === "number" ? -1 : 1);
  [...body.rows].sort((a, b) => (ascending ? 1 : -1) * compare(value(a), value(b)))\
.forEach(row => body.appendChild(row));
}));
"""


def write(report: Report, out: Path, refresh_s: int | None = None) -> Path:
    """Write the report under `out`; returns the index page. With `refresh_s`, pages reload
    themselves that often (`marinbuild serve` regenerates them meanwhile)."""
    steps_dir = out / STEPS_DIR
    steps_dir.mkdir(parents=True, exist_ok=True)
    pages = {steps_dir / step_file(step.label): step_page(step) for step in report.steps.values()}
    for old in steps_dir.glob("*.html"):  # pages of steps no longer selected
        if old not in pages:
            old.unlink()
    index = out / "index.html"
    pages[index] = index_page(report)
    for path, (title, body) in pages.items():
        path.write_text(_page(title, body, refresh_s))
    return index


def _page(title: str, body: str, refresh_s: int | None) -> str:
    refresh = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{refresh}'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>\n<body>\n{body}\n"
        f"<script>{_SORT_SCRIPT}</script>\n</body></html>\n"
    )
