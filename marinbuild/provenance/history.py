"""The history of a store: its invocations (one per build command) and the attempts each made.

An invocation record is written when a build starts (`result: running`, every target
`pending`), rewritten when a step starts after cache hits were found (they read `cached`
from then on: actions/bookkeeping/events.py, HitsRecorded), and rewritten when it ends (`succeeded`,
`failed`, `interrupted`), with every target's status, key and, for the steps that ran,
the id of their attempt. A build killed outright leaves its record `running`; read on
the machine it ran on, whose process table says it is gone, it reads `abandoned`. The
targets an interrupted or abandoned build's record still lists as `pending` are read
from the attempts it made: what it published reads `built` (a build killed outright
never wrote that into its record), the step it was running when stopped `cancelled` or
`abandoned`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from marinbuild.provenance.attempts import AttemptRecord, label_attempts, read_attempt
from marinbuild.store import AttemptStatus, Records, Store


@dataclass(frozen=True)
class TargetOutcome:
    """What one build did with one target: `built`, `cached`, `failed`, `skipped`, or
    `pending` while the build runs (or when it was killed)."""

    label: str
    status: str
    key: str | None
    attempt_id: str | None  # set when the step ran in this build


@dataclass(frozen=True)
class Invocation:
    """One build command; `record` is the whole JSON object."""

    invocation_id: str
    record: dict[str, Any]

    @property
    def result(self) -> str:
        return self.record.get("result", "succeeded" if not self.record.get("counts", {}).get("failed") else "failed")

    @property
    def started(self) -> str | None:
        return self.record.get("started")

    @property
    def user(self) -> str | None:
        return self.record.get("user")

    @property
    def host(self) -> str | None:
        return self.record.get("host")

    @property
    def command(self) -> str:
        """`build`, `rerun` (its pattern is the key) or `rerun --check`."""
        return self.record.get("command", "build")

    @property
    def patterns(self) -> list[str]:
        return list(self.record.get("patterns", []))

    @property
    def targets(self) -> list[TargetOutcome]:
        return [
            TargetOutcome(item["label"], item["status"], item.get("key"), item.get("attempt"))
            for item in self.record.get("targets", [])
        ]

    def to_json(self) -> dict[str, Any]:
        return dict(self.record)


@dataclass(frozen=True)
class HistoryItem:
    """An invocation with the outcomes that matched the history's filter, and for each step
    that ran, its attempt record (None if `cache gc` has removed it since)."""

    invocation: Invocation
    outcomes: list[tuple[TargetOutcome, AttemptRecord | None]]

    def to_json(self) -> dict[str, Any]:
        return {
            **{name: value for name, value in self.invocation.record.items() if name != "targets"},
            "targets": [
                {
                    "label": outcome.label,
                    "status": outcome.status,
                    "key": outcome.key,
                    **({"attempt": attempt.to_json()} if attempt is not None else {}),
                }
                for outcome, attempt in self.outcomes
            ],
        }


def read_invocation(store: Store, invocation_id: str) -> Invocation | None:
    record = Records(store).read_invocation(invocation_id)
    if record is None:
        return None
    if record.get("result") == "running" and _builder_gone(invocation_id, record):
        record = {**record, "result": "abandoned"}
    if record.get("result") in _CUT_SHORT:
        record = _settle(store, invocation_id, record)
    return Invocation(invocation_id, record)


# Builds that ended before every step they started could report its end to the record.
_CUT_SHORT = ("interrupted", "abandoned")


def _settle(store: Store, invocation_id: str, record: dict[str, Any]) -> dict[str, Any]:
    """An interrupted or abandoned build's record, with what it did to the targets it still
    lists as `pending`, read from the attempts it made: a step it published (which a build
    killed outright never wrote into its record), one it was running when stopped
    (`cancelled`, or `abandoned` when its builder died). Counts follow."""
    targets = [dict(item) for item in record.get("targets", [])]
    pending = [item for item in targets if item.get("status") == "pending"]
    if not pending:
        return record
    counts = dict(record.get("counts", {}))
    for item in pending:
        made = [attempt for attempt in label_attempts(store, item["label"]) if attempt.invocation == invocation_id]
        if not made:
            continue
        attempt = made[-1]
        status = "built" if attempt.status is AttemptStatus.SUCCEEDED else attempt.status.value
        item.update(status=status, key=attempt.key, attempt=attempt.attempt_id)
        counts[status] = counts.get(status, 0) + 1
    return {**record, "targets": targets, "counts": counts}


def _builder_gone(invocation_id: str, record: dict[str, Any]) -> bool:
    """Whether the build's process is known to be dead: only its own machine can tell (the
    id holds its process id)."""
    if record.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(invocation_id.split("-")[1]), 0)
    except ProcessLookupError:
        return True
    except (IndexError, ValueError, PermissionError):
        return False
    return False


def invocations(store: Store) -> Iterator[Invocation]:
    """Every invocation recorded in the store, newest first (read lazily)."""
    for invocation_id in reversed(Records(store).invocation_ids()):
        found = read_invocation(store, invocation_id)
        if found is not None:
            yield found


def history(
    store: Store, matches: Callable[[str], bool] = lambda label: True, limit: int | None = None, ran_only: bool = True
) -> list[HistoryItem]:
    """The newest invocations that did something to a label `matches` accepts, newest first.

    With `ran_only`, a target only counts when its step ran (built or failed) or was
    skipped; cache hits are left out."""
    items: list[HistoryItem] = []
    for invocation in invocations(store):
        outcomes = [
            (
                outcome,
                read_attempt(store, outcome.key, outcome.attempt_id) if outcome.key and outcome.attempt_id else None,
            )
            for outcome in invocation.targets
            if matches(outcome.label) and not (ran_only and outcome.status == "cached")
        ]
        if outcomes:
            items.append(HistoryItem(invocation, outcomes))
        if limit is not None and len(items) >= limit:
            break
    return items
