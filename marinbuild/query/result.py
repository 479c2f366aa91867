"""Running a query: parse, evaluate, order; the result renders in any output format."""

from __future__ import annotations

from dataclasses import dataclass

from marinbuild.query.evaluator import BuildState, Evaluator
from marinbuild.query.order import dependency_order
from marinbuild.query.output import FORMATS
from marinbuild.query.parser import parse
from marinbuild.query.universe import Universe


@dataclass(frozen=True)
class QueryResult:
    labels: tuple[str, ...]  # in dependency order: each target before what it depends on
    universe: Universe
    warnings: tuple[str, ...]  # what --keep-going skipped; outputs built by rule code changed since (stale())

    def render(self, output: str) -> str:
        return FORMATS[output](self.labels, self.universe)


def run_query(expression: str, universe: Universe, state: BuildState) -> QueryResult:
    """Evaluate `expression` over `universe`. Parsing comes first: a typo costs no loading."""
    tree = parse(expression)
    labels = Evaluator(universe, expression, state).evaluate(tree)
    return QueryResult(tuple(dependency_order(labels, universe.direct_labels)), universe, tuple(universe.warnings))
