"""Evaluating a query: every expression is a set of labels over the universe's graph.

Sets are unordered here; the printed order is computed once, at the end (`order`).
Traversals are breadth-first, so a depth bound keeps exactly the targets within that
many edges, as Bazel's `deps(x, n)` and `rdeps(u, x, n)` do.

The store functions are marinbuild's own. They ask the scheduler's dry run rather than
recompute keys, so `cached(x)` means precisely "a build would not run it": a rule target
is cached (its key has a verified output), stale (its key is known and has none),
pending (its key needs the output of a dependency that is not built), and failed when
its key is known and the newest attempt at that key failed. A target built only in a
mirror of the store (another region's bucket) is cached, and `mirrored`: a build copies it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from marinbuild.actions.bookkeeping.results import BuildResult, Status, TargetResult
from marinbuild.errors import GraphError, LabelError, LoadError, QueryError
from marinbuild.provenance.explain import CODE_CHANGED
from marinbuild.query import expressions as syntax
from marinbuild.query.attributes import attribute_text, attribute_value
from marinbuild.query.functions import SIGNATURES
from marinbuild.query.order import sort_key
from marinbuild.query.universe import Universe, kind_of
from marinbuild.targets.rule import Target

Labels = frozenset[str]


class BuildState(Protocol):
    """What the store knows about rule targets (the session provides it)."""

    def dry_run(self, labels: Sequence[str]) -> BuildResult: ...

    def last_attempt_status(self, key: str) -> str | None: ...


class Evaluator:
    def __init__(self, universe: Universe, expression: str, state: BuildState):
        self.universe = universe
        self.expression = expression
        self.state = state
        self._results: dict[str, TargetResult] = {}  # dry-run results so far, by label
        self._functions: dict[str, Callable[..., Labels]] = {
            "deps": self._deps,
            "rdeps": self._rdeps,
            "allpaths": self._allpaths,
            "somepath": self._somepath,
            "kind": self._kind,
            "filter": self._filter,
            "attr": self._attr,
            "labels": self._labels,
            "some": self._some,
            "siblings": self._siblings,
            "buildfiles": self._buildfiles,
        }

    def evaluate(self, node: syntax.Expression, variables: Mapping[str, Labels] | None = None) -> Labels:
        variables = variables or {}
        match node:
            case syntax.TargetLiteral():
                return self._pattern(node)
            case syntax.Variable():
                return variables[node.name]
            case syntax.Let():
                value = self.evaluate(node.value, variables)
                return self.evaluate(node.body, {**variables, node.name: value})
            case syntax.SetOperation():
                left, right = self.evaluate(node.left, variables), self.evaluate(node.right, variables)
                return {"intersect": left & right, "union": left | right, "except": left - right}[node.operator]
            case syntax.SetLiteral():
                return frozenset().union(*(self._pattern(item) for item in node.items))
            case syntax.FunctionCall():
                return self._call(node, variables)
        raise AssertionError(f"unknown expression {node!r}")

    def _error(self, message: str, column: int, hint: str | None = None) -> QueryError:
        return QueryError(message, expression=self.expression, column=column, hint=hint)

    def _pattern(self, literal: syntax.TargetLiteral) -> Labels:
        try:
            return frozenset(self.universe.matching(literal.pattern))
        except (LabelError, GraphError, LoadError) as error:
            if error.location is not None:  # a broken BUILD file: point there, not at the query
                self.universe.tolerate(error)
            else:
                self.universe.tolerate(self._error(error.message, literal.column, error.hint))
            return frozenset()

    # -- functions ------------------------------------------------------------------------

    def _call(self, call: syntax.FunctionCall, variables: Mapping[str, Labels]) -> Labels:
        args = [self.evaluate(arg, variables) if _is_expression(arg) else arg for arg in call.args]
        if SIGNATURES[call.name].store:
            return self._store_function(call.name, args[0])
        if call.name == "some" and not args[0]:
            raise self._error("some() of an empty set", call.column)
        return self._functions[call.name](*args)

    def _deps(self, roots: Labels, depth: int | None = None) -> Labels:
        return self._reach(roots, self.universe.deps, depth)

    def _rdeps(self, universe: Labels, roots: Labels, depth: int | None = None) -> Labels:
        closure = self._deps(universe)
        return self._reach(roots & closure, _reverse(closure, self.universe.deps).__getitem__, depth)

    def _allpaths(self, starts: Labels, ends: Labels) -> Labels:
        closure = self._deps(starts)
        return self._reach(ends & closure, _reverse(closure, self.universe.deps).__getitem__)

    def _somepath(self, starts: Labels, ends: Labels) -> Labels:
        """A shortest path from the first start (in label order) that reaches an end."""
        for start in sorted(starts, key=sort_key):
            parents: dict[str, str | None] = {start: None}
            frontier = [start]
            while frontier:
                reached = next((label for label in frontier if label in ends), None)
                if reached is not None:
                    path: list[str] = []
                    step: str | None = reached
                    while step is not None:
                        path.append(step)
                        step = parents[step]
                    return frozenset(path)
                following = []
                for label in frontier:
                    for dep in self.universe.deps(label):
                        if dep not in parents:
                            parents[dep] = label
                            following.append(dep)
                frontier = following
        return frozenset()

    def _kind(self, pattern: syntax.Word, targets: Labels) -> Labels:
        regex = self._regex(pattern)
        return frozenset(label for label in targets if regex.search(kind_of(self.universe.node(label))))

    def _filter(self, pattern: syntax.Word, targets: Labels) -> Labels:
        regex = self._regex(pattern)
        return frozenset(label for label in targets if regex.search(label))

    def _attr(self, name: syntax.Word, pattern: syntax.Word, targets: Labels) -> Labels:
        regex = self._regex(pattern)
        matched = set()
        for label, target in self._rules(targets):
            found, value = attribute_value(target, name.text)
            if found and regex.search(attribute_text(value)):
                matched.add(label)
        return frozenset(matched)

    def _labels(self, name: syntax.Word, targets: Labels) -> Labels:
        found: set[str] = set()
        for _label, target in self._rules(targets):
            attr = target.rule.all_attrs.get(name.text)
            if attr is None:
                continue
            for label in attr.type.labels(target.attrs[name.text]):
                try:
                    self.universe.node(label)
                    found.add(label)
                except (GraphError, LoadError) as error:
                    self.universe.tolerate(error)
        return frozenset(found)

    def _some(self, targets: Labels, count: int = 1) -> Labels:
        return frozenset(sorted(targets, key=sort_key)[:count])

    def _siblings(self, targets: Labels) -> Labels:
        packages = {label[2:].partition(":")[0] for label in targets}
        return frozenset(label for package in packages for label in self.universe.package_targets(package, files=True))

    def _buildfiles(self, targets: Labels) -> Labels:
        return frozenset(file for label in targets for file in self.universe.build_files(label))

    def _store_function(self, name: str, targets: Labels) -> Labels:
        results = self._dry_run([label for label, _target in self._rules(targets)])
        if name == "failed":
            return frozenset(
                label
                for label, result in results.items()
                if result.key is not None and self.state.last_attempt_status(result.key) == "failed"
            )
        if name == "stale":
            # Cached, so not stale by key; but built by code that has changed since.
            self.universe.warnings.extend(
                f"{label}: {CODE_CHANGED}" for label, result in sorted(results.items()) if result.code_changed
            )
        wanted = {
            # Built here, or only in a mirror in another region (a build copies it, runs nothing).
            "cached": (Status.CACHED, Status.WOULD_COPY),
            "mirrored": (Status.WOULD_COPY,),
            "stale": (Status.WOULD_RUN,),
            "pending": (Status.PENDING,),
        }[name]
        return frozenset(label for label, result in results.items() if result.status in wanted)

    # -- helpers --------------------------------------------------------------------------

    def _reach(self, roots: Iterable[str], step: Callable[[str], Iterable[str]], depth: int | None = None) -> Labels:
        """Everything within `depth` steps of `roots` (unbounded if None), breadth-first."""
        seen = set(roots)
        frontier = list(seen)
        level = 0
        while frontier and (depth is None or level < depth):
            following = []
            for label in frontier:
                for neighbour in step(label):
                    if neighbour not in seen:
                        seen.add(neighbour)
                        following.append(neighbour)
            frontier = following
            level += 1
        return frozenset(seen)

    def _rules(self, labels: Labels) -> list[tuple[str, Target]]:
        pairs = ((label, self.universe.node(label)) for label in sorted(labels, key=sort_key))
        return [(label, node) for label, node in pairs if isinstance(node, Target)]

    def _regex(self, word: syntax.Word) -> re.Pattern[str]:
        try:
            return re.compile(word.text)
        except re.error as error:
            raise self._error(f"invalid regular expression '{word.text}': {error}", word.column) from None

    def _dry_run(self, labels: list[str]) -> dict[str, TargetResult]:
        """Dry-run results for `labels`, running the scheduler only for those not yet known."""
        unknown = [label for label in labels if label not in self._results]
        if unknown:
            self._results.update(self.state.dry_run(unknown).results)
        return {label: self._results[label] for label in labels}


def _is_expression(arg: syntax.Expression | syntax.Word | int) -> bool:
    return not isinstance(arg, (syntax.Word, int))


def _reverse(labels: Labels, deps: Callable[[str], Iterable[str]]) -> dict[str, list[str]]:
    """Who depends on whom, among `labels` (a set closed under `deps`)."""
    reverse: dict[str, list[str]] = {label: [] for label in labels}
    for label in labels:
        for dep in deps(label):
            reverse[dep].append(label)
    return reverse
