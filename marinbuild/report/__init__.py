"""`marinbuild report`: one static HTML page per experiment, from the workspace and the store alone.

collect     what to show: statuses (the dry run's), attempts and logs, the small outputs
            each rule declares
diagram     the dependency graph as SVG (Graphviz when installed, else a layered layout)
plots       curves and histograms (matplotlib, SVG)
pages       writes the pages, each self-contained: index_page (failures, graph, runs, the
            rules' own sections, plots, steps) and step_page; runs is the runs table;
            blocks the small pieces they share, and the call of a rule's own section
serve       the same pages on localhost, regenerated while builds run
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from marinbuild.report.collect import Report, StepReport, StepStatus, collect
from marinbuild.report.pages import write
from marinbuild.session import Session

__all__ = ["Report", "StepReport", "StepStatus", "collect", "write", "write_report"]


def write_report(session: Session, patterns: Sequence[str], out: Path) -> Path:
    """Collect the report of the targets `patterns` select and write it under `out`;
    returns the index page."""
    return write(collect(session, patterns), out)
