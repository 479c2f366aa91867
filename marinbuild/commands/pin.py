"""`pin`: record what the URLs of external artifacts hold (actions/analysis/pins.py)."""

from __future__ import annotations

from collections.abc import Sequence

from marinbuild.actions.analysis.pins import Pinned
from marinbuild.errors import GraphError
from marinbuild.session import Session


def pin(session: Session, patterns: Sequence[str]) -> list[Pinned]:
    """Pin the external artifacts the patterns name: list what each URL holds (nothing
    is downloaded) and record its digest in marinbuild.lock."""
    graph = session.plan(patterns)
    targets = [graph.targets[label] for label in graph.requested if graph.targets[label].rule.pinned]
    if not targets:
        raise GraphError(
            f"{' '.join(patterns)} names no external artifact",
            hint="pin targets of the rule external(name, url)",
        )
    return session.pins.pin(targets)
