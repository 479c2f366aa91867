"""The invocation record: every run of steps (`build`, `rerun`, `rerun --check`) is recorded
in the store's history when it starts and again when it ends, with its event stream
(provenance/history.py reads them back; `cache gc` keeps what the newest ones used).
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from marinbuild import store as stores
from marinbuild.actions.analysis.graph import Graph
from marinbuild.actions.bookkeeping.build_provenance import Provenance
from marinbuild.actions.bookkeeping.events import EventStream, HitsRecorded, Tee
from marinbuild.actions.bookkeeping.results import BuildResult, Reporter, pending_json
from marinbuild.actions.execution.build_options import BuildOptions
from marinbuild.actions.execution.executor import Executor
from marinbuild.actions.execution.scheduler import Scheduler
from marinbuild.errors import EgressOverBudget, StoreReadOnly
from marinbuild.session import Session
from marinbuild.store.records import Records


@dataclass(frozen=True)
class InvocationRecord:
    """One run of steps as the store's history records it: written when it starts and again
    when it ends (provenance/history.py). The provenance is the run's, so git is asked about
    the workspace once per build."""

    session: Session
    records: Records
    command: str
    patterns: Sequence[str]
    provenance: Provenance
    order: list[str]  # the graph's labels, in its order
    started: float = field(default_factory=time.time)

    def write(
        self, result: BuildResult, outcome: str, stream: EventStream | None = None, certified: bool = False
    ) -> None:
        """The record as of `result`; `certified`: the results are a no-op certificate's
        (commands/certified.py)."""
        order = self.order
        if list(result.results) == order:  # every target has its result, in the graph's order
            targets = result.targets_json()
        elif not result.results:  # the build starts
            targets = pending_json(order)
        else:
            results = result.results
            targets = json.dumps(
                [
                    results[label].to_json() if label in results else {"label": label, "key": None, "status": "pending"}
                    for label in order
                ]
            )
        record = {
            "id": self.provenance.invocation_id,
            "command": self.command,
            "patterns": list(self.patterns),
            "cwd": os.fspath(self.session.cwd),
            "workspace": os.fspath(self.session.workspace.root),  # which checkout (`cache gc` on a shared store)
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "duration_s": round(time.time() - self.started, 3),
            "result": outcome,
            "counts": result.counts,
            **self.provenance.invocation,
            **({"noop_certificate": True} if certified else {}),
        }
        self.records.write_invocation(record, None if stream is None else stream.jsonl, targets)


def run_recorded(
    session: Session,
    command: str,
    graph: Graph,
    patterns: list[str],
    options: BuildOptions,
    reporter: Reporter,
    events: Path | None = None,
) -> Scheduler:
    """Run a graph with its invocation record (written at the start and at the end) and event stream."""
    stores.require_leases(session.store, session.unsafe_no_locking)
    salt = stores.store_salt(session.store, create=True)
    stream = EventStream(events)
    hits = HitsRecorded()
    executor = _executor(session, options)
    scheduler = session.scheduler(graph, options, Tee(reporter, stream, hits), executor, salt)
    invocation = InvocationRecord(
        session, session.cache.records, command, patterns, scheduler.provenance, scheduler.graph.order
    )
    record = functools.partial(invocation.write, scheduler.result)
    try:
        record("running")
    except StoreReadOnly as refused:
        # Readers of a team's bucket may not write to it: what is cached is still theirs.
        reporter.warning(f"{refused.message}; this build is not recorded in the store's history")
        scheduler.read_only = refused
        record = _not_recorded
    hits.rewrite = functools.partial(record, "running")
    try:
        result = scheduler.run()
    except KeyboardInterrupt:
        record("interrupted", stream)
        raise
    except EgressOverBudget:
        record("failed", stream)
        raise
    finally:
        if executor is not None:
            executor.close()
    record("succeeded" if result.ok else "failed", stream)
    return scheduler


def _not_recorded(*args: object) -> None:
    """Where the invocation record goes on a read-only store: nowhere."""


def _executor(session: Session, options: BuildOptions) -> Executor | None:
    """None: the scheduler's local default."""
    if options.executor != "ray":
        return None
    from marinbuild.cluster.ray_executor import RayExecutor  # imports Ray: only when asked for

    return RayExecutor(
        session.store,
        session.workspace.root,
        options.ray_address,
        options.ray_placement_timeout_s,
        options.ray_shared_scratch,
        options.steps,
    )
