"""`query`: an expression of Bazel's query language (docs/query.md) over the workspace's
graph; the store's functions (`cached()`, `stale()`, ...) ask the session's dry run."""

from __future__ import annotations

from marinbuild.query import QueryResult, Universe, run_query
from marinbuild.session import Session


def query(session: Session, expression: str, keep_going: bool = False) -> QueryResult:
    """Evaluate a query expression. Writes nothing to the store."""
    universe = Universe(session.loader, session.workspace.package_of(session.cwd), session.skip_dirs(), keep_going)
    result = run_query(expression, universe, session)
    session.loader.save_cache()
    session.stat_cache.save()
    return result
