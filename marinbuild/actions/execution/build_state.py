"""What one build knows as it walks its graph: each target's key, outputs and result, and
who waits for what.

The parts of a build (planning, kept checkpoints, mirror copies, running steps, the
scheduler) all read and add to this one record, on the coordinator's thread; none of them
holds a copy of it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marinbuild.actions.analysis import keys
from marinbuild.actions.analysis.graph import Graph
from marinbuild.actions.bookkeeping.results import BuildResult, Reporter, TargetResult
from marinbuild.actions.execution.executor import Dependencies
from marinbuild.hashing import StatCache
from marinbuild.store import Outputs
from marinbuild.targets.rule import Rule, Target


@dataclass(frozen=True)
class Planned:
    """A target whose key is known."""

    target: Target
    key: str
    recipe: dict[str, Any]
    why: str | None = None  # why it runs, with --explain


class BuildState:
    """The record of one build over `graph`; `result` is what it reports (each result
    also goes to `reporter` as it is recorded)."""

    def __init__(self, graph: Graph, reporter: Reporter):
        self.graph = graph
        self.reporter = reporter
        self.result = BuildResult(requested=graph.requested)
        self.outputs: dict[str, Outputs] = {}
        self.tokens: dict[str, str] = {}
        # Who waits for what: rule targets and kept states (graph.checkpoints) alike.
        self.dependents: dict[str, list[str]] = {name: [] for name in (*graph.targets, *graph.checkpoints)}
        self.waiting: dict[str, int] = {}
        for label in graph.order:
            inputs = dict.fromkeys(graph.inputs(label))
            self.waiting[label] = len(inputs)
            for dep in inputs:
                self.dependents[dep].append(label)
        self.kept: dict[str, list[str]] = {}  # a target -> the names of its kept states the graph reads
        for name, checkpoint in graph.checkpoints.items():
            self.kept.setdefault(checkpoint.of, []).append(name)
        self.keys: dict[str, str] = {}  # the key of each target whose key is known
        self._code_digests: dict[str, str] = {}  # by rule name (`code_digest`)
        self.ready: deque[str] = deque()  # targets whose inputs are all known
        self.requested = set(graph.requested)

    def known(self, label: str, outputs: Outputs) -> bool:
        """A target's (or a kept state's) outputs are known: dependents whose inputs are now
        all known become ready. False if they were known already."""
        if label in self.outputs:
            return False  # a kept state announced by its running step and found again since
        self.outputs[label] = outputs
        self.tokens[label] = keys.output_token(outputs.tree_digest)
        for dependent in self.dependents[label]:
            self.waiting[dependent] -= 1
            if self.waiting[dependent] == 0:
                self.ready.append(dependent)
        return True

    def code_digest(self, rule: Rule, stat_cache: StatCache) -> str:
        """`keys.code_digest`, once per rule and build: a no-op asks for every cached
        target's, and a build must see the code as it is now, not as an earlier build did."""
        found = self._code_digests.get(rule.name)
        if found is None:
            found = self._code_digests[rule.name] = keys.code_digest(rule, stat_cache)
        return found

    def record(self, result: TargetResult) -> None:
        target = self.graph.targets[result.label]
        if result.output is not None and result.label in self.requested:
            headline = target.rule.headline
            if headline is not None:
                result = dataclasses.replace(result, headline=headline(Path(result.output)))
        if target.attrs["description"]:
            result = dataclasses.replace(result, description=target.attrs["description"])
        self.result.results[result.label] = result
        self.reporter.step_finished(result)

    def downstream(self, label: str) -> list[str]:
        """The targets that depend on `label` and have no result yet, dependencies first (as
        a dry run or a failure lists them); through the kept states of a target not yet
        resolved, whose readers wait for it too."""
        seen: set[str] = set()
        stack = list(self.dependents[label])
        stack += self._readers_waiting(label)
        while stack:
            current = stack.pop()
            if current not in seen and current not in self.result.results:
                seen.add(current)
                stack.extend(self.dependents[current])
                stack += self._readers_waiting(current)
        return sorted(seen, key=self._position.__getitem__)

    def _readers_waiting(self, label: str) -> list[str]:
        """The targets reading a kept state of `label` that is not known yet."""
        return [
            reader for name in self.kept.get(label, ()) if name not in self.outputs for reader in self.dependents[name]
        ]

    @functools.cached_property
    def _position(self) -> dict[str, int]:
        return {label: index for index, label in enumerate(self.graph.order)}

    def dependencies(self, target: Target) -> Dependencies:
        """What a step reads: each input's source file, or its outputs."""
        return {
            label: self.graph.sources[label].path if label in self.graph.sources else self.outputs[label]
            for label in self.graph.deps[str(target.label)]
        }
