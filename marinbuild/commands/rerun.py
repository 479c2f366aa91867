"""`rerun`: rebuild the recipe stored under a key from the store alone (the BUILD files may
have changed or be gone): what is cached is reused, what is missing built again. `rerun
--check` runs a cached key's step once more, aside, and compares it with what is published
(provenance/rerun.py rebuilds the graph of a stored recipe and compares the outputs).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from marinbuild import store as stores
from marinbuild.actions.analysis.graph import Graph
from marinbuild.actions.bookkeeping.results import BuildResult, Reporter
from marinbuild.actions.execution.build_options import BuildOptions
from marinbuild.actions.execution.scheduler import Scheduler
from marinbuild.commands.invocation import run_recorded
from marinbuild.errors import StoreError
from marinbuild.packages.rule_modules import workspace_rules
from marinbuild.provenance import rerun as recipes
from marinbuild.provenance.explain import recipe_changes
from marinbuild.session import Session
from marinbuild.store import AttemptStatus


@dataclass(frozen=True)
class RerunResult:
    key: str
    label: str
    build: BuildResult
    changes: list[str]  # why the rebuilt recipe has another key (e.g. external inputs differ here)
    identical: bool | None  # the rebuilt output against the recorded one (None: nothing to compare)

    @property
    def ok(self) -> bool:
        return self.build.ok and not self.changes


def rerun(session: Session, key_text: str, options: BuildOptions, reporter: Reporter) -> RerunResult:
    """Rebuild the recipe stored under a key (a unique prefix will do)."""
    cache = session.cache
    key = recipes.find_key(cache, key_text)
    recorded = cache.read_entry(key)
    with tempfile.TemporaryDirectory(prefix="marinbuild-rerun-") as sources:
        graph = recipes.recipe_graph(cache, workspace_rules(session.workspace), key, Path(sources))
        scheduler = _run_recipe(session, graph, key, options, reporter, "rerun")
    label = graph.requested[0]
    result = scheduler.result.results[label]
    changes = []
    if result.key is not None and result.key != key:
        before = recorded.recipe if isinstance(recorded, stores.CacheEntry) else {}
        changes = recipe_changes(before, scheduler.recipe(label) or {}, graph.targets[label])
    outputs = cache.lookup(result.key).outputs if result.key == key else None
    identical = None
    if isinstance(recorded, stores.CacheEntry) and outputs is not None:
        identical = outputs.tree_digest == recorded.tree_digest
    return RerunResult(key, label, scheduler.result, changes, identical)


def check(session: Session, key_text: str, options: BuildOptions, reporter: Reporter) -> recipes.CheckReport:
    """Run the recipe of a cached key again, aside, and compare with what is published."""
    cache = session.cache
    key = recipes.find_key(cache, key_text)
    with tempfile.TemporaryDirectory(prefix="marinbuild-rerun-") as sources:
        graph = recipes.recipe_graph(cache, workspace_rules(session.workspace), key, Path(sources))
        scheduler = _run_recipe(session, graph, key, options, reporter, "rerun --check")
        label = graph.requested[0]
        if not scheduler.result.ok or scheduler.result.results[label].key != key:
            raise StoreError(
                f"the recipe of {key[:12]} could not be rebuilt here",
                hint=f"'marinbuild rerun {key[:12]}' says why",
            )
        side, outcome = scheduler.run_aside(label)
    if outcome.status is not AttemptStatus.SUCCEEDED:
        raise StoreError(
            f"the rerun of {label} failed: {outcome.error}",
            hint=f"its log: 'marinbuild log {label}' (attempt {side.attempt_id})",
        )
    report = recipes.check_outputs(cache, graph.targets[label].rule, key, side.staging.out)
    if report.identical:
        shutil.rmtree(side.staging.root, ignore_errors=True)
    return report


def _run_recipe(
    session: Session, graph: Graph, key: str, options: BuildOptions, reporter: Reporter, command: str
) -> Scheduler:
    strict = recipes.stored_recipe(session.cache, key).strict_code
    return run_recorded(session, command, graph, [key], dataclasses.replace(options, strict_code=strict), reporter)
