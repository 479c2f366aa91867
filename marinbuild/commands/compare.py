"""`compare`: the training runs among the targets some patterns name, side by side, with their
evaluations (provenance/compare.py). Reads the store, writes nothing."""

from __future__ import annotations

from collections.abc import Sequence

from marinbuild.packages.rule_modules import workspace_rules
from marinbuild.provenance.compare import Comparison, compare_runs
from marinbuild.session import Session


def compare(
    session: Session, patterns: Sequence[str], by: str | None = None, maximize: bool = False, history: bool = False
) -> Comparison:
    """The runs the patterns name, and the evaluations among them; with `history`, their
    earlier outputs still in the store too."""
    graph = session.plan(patterns)
    # Which runs are built: their entries verified, not every file of their outputs, as
    # `compare_runs` checks each byte it shows against its manifest (`read_output`).
    with session.cache.entries_only():
        planned = session.dry_run_graph(graph)
    return compare_runs(
        session.cache,
        graph,
        planned,
        workspace_rules(session.workspace),
        by=by,
        maximize=maximize,
        history=history,
    )
