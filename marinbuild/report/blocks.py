"""The report's own building blocks: where each step's page is, a status badge, a link to a
step, a JSON block, a duration, and a rule's own section (`Rule.report_section`), rendered
by the rule's code from what the report read. Numbers, cells, tables and images are the
rules API's (targets/html_blocks.py), shared with those sections.
"""

from __future__ import annotations

import json
import re
from html import escape
from typing import Any

from marinbuild.hashing import digest_bytes
from marinbuild.report import diagram
from marinbuild.report.collect import StepReport, StepStatus
from marinbuild.targets.outputs import StepOutputs
from marinbuild.targets.rule import import_function

STEPS_DIR = "steps"


def step_file(label: str) -> str:
    """A file name per label: readable, and distinct even where two labels read alike."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", label.lstrip("/")).strip("_")
    return f"{readable}-{digest_bytes(label.encode())[:6]}.html"


def badge(status: StepStatus) -> str:
    fill, stroke = diagram.COLOURS[status]
    return f'<span class="badge status" style="background:{fill};border-color:{stroke}">{escape(status.value)}</span>'


def link(label: str, prefix: str) -> str:
    return f'<a href="{prefix}{step_file(label)}">{escape(label)}</a>'


def json_block(value: Any) -> str:
    return f"<pre>{escape(json.dumps(value, indent=2, sort_keys=True, default=str))}</pre>"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def rule_section(step: StepReport, prefix: str) -> str | None:
    """The HTML of the step's rule's own section (None: its rule has none, or its outputs
    hold nothing to show), with its link to the step's page from a page under `prefix`.
    The rule's code is imported here, by name, only for a report: the engine imports no rule."""
    section = step.target.rule.report_section
    if section is None or step.entry is None:
        return None
    read = {path: found.data for path, found in step.files.items() if path in section.reads}
    plots = tuple((found.path, found.data) for found in step.plots)
    outputs = StepOutputs(step.label, prefix + step_file(step.label), read, plots)
    return import_function(section.render)(outputs)
