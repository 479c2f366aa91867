"""What the store recorded, read back for a workspace: `show` (what made an output),
`explain` (whether a target would run, and why), a target's attempts (`log`) and the
history of builds. None of them writes to the store."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from marinbuild import provenance
from marinbuild.actions.analysis.graph import expand_patterns
from marinbuild.actions.execution.resume import resume_point
from marinbuild.commands.outputs import resolve_output
from marinbuild.errors import GraphError
from marinbuild.labels import matches_patterns, parse_label, parse_pattern
from marinbuild.packages.rule_modules import workspace_rules
from marinbuild.provenance.explain import Explanation, explain_target
from marinbuild.provenance.show import describe
from marinbuild.session import Session


def show(session: Session, text: str, recursive: bool = False) -> tuple[dict, str | None]:
    """The recipe, provenance, files and metrics of an output (provenance/show.py); for
    an external artifact, where it lives and its pin."""
    if ":" in text or "/" in text:
        graph = session.plan([text])
        target = graph.targets[graph.requested[0]] if len(graph.requested) == 1 else None
        if target is not None and target.rule.pinned:
            return session.pins.describe(target), None
    key, note = resolve_output(session, text)
    return describe(session.cache, key, workspace_rules(session.workspace), recursive), note


def explain(session: Session, label: str, strict_code: bool = False) -> Explanation:
    """Whether a target would run and why: each ingredient of its key, and for a miss the
    differences from its nearest earlier entry (provenance/explain.py)."""
    graph = session.plan([label])
    if len(graph.requested) != 1:
        raise GraphError(f"'{label}' names {len(graph.requested)} targets; 'explain' takes one label")
    scheduler = session.dry_scheduler(graph, strict_code)
    explanation = explain_target(session.cache, scheduler.graph, scheduler.result, scheduler.recipe, graph.requested[0])
    if explanation.status == "would-run" and explanation.key is not None:
        point = resume_point(session.store, graph.targets[explanation.label].rule, explanation.key)
        explanation = dataclasses.replace(explanation, resumes_from=point)
    return explanation


def attempts(session: Session, label: str) -> list[provenance.AttemptRecord]:
    """Every recorded attempt of a target, at any of its keys, oldest first. `label` may
    be relative to the current directory; the target need not exist any more."""
    return provenance.label_attempts(session.store, str(parse_label(label, session.workspace.package_of(session.cwd))))


def history(
    session: Session, patterns: Sequence[str] = (), limit: int | None = None, ran_only: bool = True
) -> list[provenance.HistoryItem]:
    """The newest builds that ran (or skipped) a target the patterns match (all, without patterns)."""
    cwd_package = session.workspace.package_of(session.cwd)
    parsed = [parse_pattern(text, cwd_package) for text in patterns]
    items = provenance.history(
        session.store, lambda label: matches_patterns(parsed, parse_label(label)), limit, ran_only
    )
    recorded = {outcome.label for item in items for outcome, _attempt in item.outcomes}
    for pattern in parsed:
        if not pattern.negative and not any(matches_patterns([pattern], parse_label(label)) for label in recorded):
            # An unknown package or target is bad input (exit 2), as for build, not an
            # empty history; a target deleted since its builds still shows them.
            expand_patterns(session.loader, [pattern], session.skip_dirs())
    return items
