"""What a report shows, gathered from the workspace's graph and the store alone.

Statuses come from the same dry run as `build --dry-run` and `query cached()/stale()/
failed()`, so the report never disagrees with them about what a build would do: a step
built only in a mirror of the store (another region's bucket) shows that bucket's entry
and what a copy would move, and none of its output files (they are not read across
regions). The output files a step's rule declares (its summary metrics, curves, what its
report section reads) and its plots are read from the store by manifest path and checked
against their digests, so a report of a `gs://` store downloads only them.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from marinbuild import provenance
from marinbuild.actions.analysis.graph import Graph
from marinbuild.actions.bookkeeping.results import Status, TargetResult
from marinbuild.packages.rule_modules import workspace_rules
from marinbuild.provenance.differences import Differences, side_by_side
from marinbuild.provenance.lineage import entry_reader
from marinbuild.session import Session
from marinbuild.store import AttemptStatus
from marinbuild.store.entries import CacheEntry
from marinbuild.store.manifest import FileEntry
from marinbuild.store.mirrors import MirrorHit
from marinbuild.targets.outputs import Curves
from marinbuild.targets.rule import Rule, Target

LOG_TAIL_LINES = 60
# What every data rule writes (docs/rules.md): its counts and distributions, in the fields
# the engine defines (provenance/data_counts.py, targets/distributions.py), shown on its page.
PLOT_SUFFIXES = (".png", ".svg")
_MAX_READ_BYTES = 8 * 2**20  # larger files are listed, not read into the report
_MAX_PLOTS_PER_STEP = 8


class StepStatus(str, enum.Enum):
    """Where a target stands against the store, as a colour of the graph."""

    CACHED = "cached"  # its current key has a verified output
    MIRRORED = "in a mirror"  # ... only in a mirror of the store, another region's bucket: a build copies it
    STALE = "stale"  # built before, but not under its current recipe (or its inputs changed)
    FAILED = "failed"  # the newest attempt at its current key failed
    RUNNING = "running"  # an attempt at its current key has not finished
    NEVER_BUILT = "never built"
    PINNED = "pinned"  # an external artifact: data that exists already, pinned by its listing


@dataclass(frozen=True)
class AttemptView:
    record: provenance.AttemptRecord
    log_tail: str | None  # the last LOG_TAIL_LINES lines; None when no log is stored


@dataclass(frozen=True)
class OutputFile:
    path: str
    data: bytes


@dataclass
class StepReport:
    label: str
    target: Target
    status: StepStatus
    result: TargetResult  # the dry run's: key (None while pending) and reason
    deps: list[str]
    dependents: list[str]
    entry: CacheEntry | None  # the action-cache entry of the current key, when cached
    attempts: list[AttemptView]
    last_build: provenance.TargetOutcome | None  # what the newest build that named it did
    last_build_reason: str | None
    # Small outputs read for the report; filled once, before anything parses them.
    files: dict[str, OutputFile] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)  # output files whose bytes did not match
    pin: dict[str, Any] | None = None  # an external artifact's: where it lives, its pin (actions/analysis/pins.py)
    copied: dict[str, Any] | None = None  # where its entry was copied from, if from a mirror (store/mirrors.py)
    mirrored: MirrorHit | None = None  # where its entry is if only in a mirror (no output is read there)

    @property
    def key(self) -> str | None:
        return self.result.key

    @property
    def kind(self) -> str:
        return self.target.rule.name

    def json_file(self, name: str) -> Any | None:
        found = self.files.get(name)
        if found is None:
            return None
        try:
            return json.loads(found.data)
        except ValueError:
            return None

    @cached_property
    def curve_rows(self) -> list[dict[str, Any]]:
        """The rows of the curves its rule declares (`Rule.curves`), if it wrote them."""
        curves = self.target.rule.curves
        found = self.files.get(curves.file) if curves is not None else None
        return Curves.rows(found.data) if found is not None else []

    @property
    def plots(self) -> list[OutputFile]:
        return [found for path, found in sorted(self.files.items()) if path.endswith(PLOT_SUFFIXES)]


@dataclass(frozen=True)
class Failure:
    """A step whose current key's newest attempt failed, and what that build skipped for it."""

    step: StepReport
    attempt: AttemptView
    invocation: provenance.Invocation | None  # gone if `cache gc` removed it
    skipped: list[tuple[str, str | None]]  # dependents that build skipped, and why


@dataclass
class Report:
    patterns: list[str]
    store_url: str
    workspace: str
    graph: Graph
    steps: dict[str, StepReport]  # dependencies first
    failures: list[Failure]
    # What tells the runs apart (hyperparameters, and attributes anywhere upstream), a row each
    # in the order of `runs`, as `marinbuild compare` finds it.
    differences: Differences | None = None

    @property
    def runs(self) -> list[StepReport]:
        """Steps whose output holds the curves their rule declares: training runs (each with its entry)."""
        return [step for step in self.steps.values() if step.entry is not None and step.curve_rows]

    def counts(self) -> dict[StepStatus, int]:
        return {status: sum(step.status is status for step in self.steps.values()) for status in StepStatus}


def collect(session: Session, patterns: Sequence[str]) -> Report:
    graph = session.plan(patterns)
    results = session.dry_run(graph.order).results
    dependents = graph.dependents()
    outcomes = _newest_outcomes(session, set(graph.order))
    steps: dict[str, StepReport] = {}
    for label in graph.order:
        result = results[label]
        attempts = provenance.label_attempts(session.store, label)
        entry, mirrored = None, None
        if result.status is Status.CACHED and result.key is not None:
            read = session.cache.read_entry(result.key)
            entry = read if isinstance(read, CacheEntry) else None
        elif result.status is Status.WOULD_COPY and result.key is not None and session.cache.mirrors is not None:
            mirrored = session.cache.mirrors.hit(result.key)  # found and verified by the dry run
            entry = mirrored.entry if mirrored is not None else None
        outcome = outcomes.get(label)
        step = StepReport(
            label=label,
            target=graph.targets[label],
            status=_status(result, attempts),
            result=result,
            deps=graph.rule_deps(label),
            dependents=dependents[label],
            entry=entry,
            attempts=[AttemptView(record, _tail(provenance.read_log(session.store, record))) for record in attempts],
            last_build=outcome[0] if outcome else None,
            last_build_reason=outcome[1] if outcome else None,
            pin=session.pins.describe(graph.targets[label]) if graph.targets[label].rule.pinned else None,
            copied=session.cache.records.read_copy(entry.key) if entry is not None and mirrored is None else None,
            mirrored=mirrored,
        )
        if entry is not None and mirrored is None:  # a mirror's outputs are not read across regions
            _read_outputs(session, step, entry, _declared_files(step.target.rule))
        steps[label] = step
    failures = [_failure(session, step) for step in steps.values() if step.status is StepStatus.FAILED]
    report = Report(list(patterns), session.store.url, str(session.workspace.root), graph, steps, failures)
    entries = [step.entry for step in report.runs if step.entry is not None]  # every run's (`runs`)
    report.differences = side_by_side(entries, entry_reader(session.cache), workspace_rules(session.workspace))
    return report


def _status(result: TargetResult, attempts: list[provenance.AttemptRecord]) -> StepStatus:
    if result.status is Status.CACHED:
        return StepStatus.CACHED
    if result.status is Status.WOULD_COPY:
        return StepStatus.MIRRORED
    if result.status is Status.PINNED:
        return StepStatus.PINNED
    at_key = [record for record in attempts if record.key == result.key] if result.key else []
    if at_key and at_key[-1].status is AttemptStatus.FAILED:
        return StepStatus.FAILED
    if at_key and at_key[-1].status is AttemptStatus.RUNNING:
        return StepStatus.RUNNING
    if any(record.status is AttemptStatus.SUCCEEDED for record in attempts):
        return StepStatus.STALE
    return StepStatus.NEVER_BUILT


def _tail(text: str | None) -> str | None:
    if text is None:
        return None
    return "\n".join(text.splitlines()[-LOG_TAIL_LINES:])


def _declared_files(rule: Rule) -> set[str]:
    """The output files a rule declares for readers (targets/outputs.py)."""
    declared = {rule.metrics_file} if rule.metrics_file else set()
    declared |= {rule.curves.file} if rule.curves is not None else set()
    return declared | set(rule.report_section.reads if rule.report_section is not None else ())


def _wanted(entry: FileEntry, declared: set[str]) -> bool:
    return entry.size <= _MAX_READ_BYTES and (entry.path in declared or entry.path.endswith(PLOT_SUFFIXES))


def _read_outputs(session: Session, step: StepReport, entry: CacheEntry, declared: set[str]) -> None:
    """Read the step's small, report-worthy output files, each checked against the manifest."""
    plots = 0
    for item in entry.manifest.files:
        if not _wanted(item, declared):
            continue
        if item.path.endswith(PLOT_SUFFIXES):
            if plots >= _MAX_PLOTS_PER_STEP:
                continue
            plots += 1
        data = session.cache.read_output(entry.key, item)
        if data is None:
            step.unreadable.append(item.path)
        else:
            step.files[item.path] = OutputFile(item.path, data)


def _newest_outcomes(session: Session, labels: set[str]) -> dict[str, tuple[provenance.TargetOutcome, str | None]]:
    """Per label, what the newest build naming it did with it, and why (skipped: which
    dependency failed)."""
    found: dict[str, tuple[provenance.TargetOutcome, str | None]] = {}
    for invocation in provenance.invocations(session.store):
        reasons = {item["label"]: item.get("reason") for item in invocation.record.get("targets", [])}
        for outcome in invocation.targets:
            if outcome.label in labels and outcome.label not in found:
                found[outcome.label] = (outcome, reasons.get(outcome.label))
        if len(found) == len(labels):
            break
    return found


def _failure(session: Session, step: StepReport) -> Failure:
    attempt = next(view for view in reversed(step.attempts) if view.record.key == step.key)  # the failed one
    invocation = (
        provenance.read_invocation(session.store, attempt.record.invocation) if attempt.record.invocation else None
    )
    skipped: list[tuple[str, str | None]] = []
    if invocation is not None:
        skipped = [
            (item["label"], item.get("reason"))
            for item in invocation.record.get("targets", [])
            if item.get("status") == "skipped" and item.get("reason") == f"dependency {step.label} failed"
        ]
    return Failure(step, attempt, invocation, skipped)
