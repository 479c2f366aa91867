"""The keys `cache gc` keeps and `cache verify` checks: the current key of every target of
the workspace, those each workspace that built into the store used last
(provenance/in_use.py), and those of the targets some patterns name."""

from __future__ import annotations

from collections.abc import Sequence

from marinbuild.actions.analysis.graph import Graph, build_graph
from marinbuild.provenance.in_use import InUse, workspaces_in_use
from marinbuild.session import Session


def workspace_keys(session: Session) -> set[str]:
    """The current key of every rule target of the workspace, `manual` ones included
    (what `cache gc` keeps). A target downstream of a missing output has no key yet."""
    packages = session.workspace.find_packages("", session.skip_dirs())
    loader = session.loader
    labels = [str(target.label) for package in packages for target in loader.package(package).targets.values()]
    return _current_keys(session, build_graph(loader, labels)) if labels else set()


def keys_in_use(session: Session) -> tuple[set[str], InUse]:
    """What `cache gc` keeps: this workspace's current keys, and the key each workspace
    that built into the store recorded for each target in its newest build of it, with
    who those workspaces are."""
    found = workspaces_in_use(session.store)
    return workspace_keys(session) | found.keys, found


def pattern_keys(session: Session, patterns: Sequence[str]) -> set[str]:
    """The current keys of the targets the patterns name (not of their dependencies)."""
    graph = session.plan(patterns)
    return _current_keys(session, graph, graph.requested)


def _current_keys(session: Session, graph: Graph, labels: Sequence[str] | None = None) -> set[str]:
    results = session.dry_run_graph(graph).results
    return {results[label].key for label in (labels or results) if results[label].key is not None}
