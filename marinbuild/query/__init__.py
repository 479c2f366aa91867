"""Query: Bazel's query language over the target graph, plus functions that ask the store.

lexer, parser   the expression, as tokens and as a tree (`expressions`), with the
                arguments each function takes (`functions`)
universe        the graph of rule targets and source files, loaded as it is reached
evaluator       expressions to sets of labels; `cached`, `mirrored`, `stale`, `failed`, `pending`
                ask the scheduler's dry run and the store's attempt records
order, output   the printed order (Bazel's) and the output formats
"""

from marinbuild.query.output import FORMATS
from marinbuild.query.parser import from_command_line
from marinbuild.query.result import QueryResult, run_query
from marinbuild.query.universe import Universe

__all__ = ["FORMATS", "QueryResult", "Universe", "from_command_line", "run_query"]
