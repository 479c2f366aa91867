"""Reading the attempt records of the store: every try at every step, failures included.

The action cache writes them (`start_attempt` / `finish_attempt`); this module reads
them back for `log`, `history`, `query failed()` and tools. A record is found by key
(`attempts/<kk>/<key>/`) or by label, through the per-label index the action cache
writes next to each record (a label's attempts may span many keys: every edit of its
recipe is a new key).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from marinbuild.actions.bookkeeping.machines import where_text
from marinbuild.store import AttemptStatus, Records, Store


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt as recorded; `record` is the whole JSON object (provenance included)."""

    key: str
    label: str
    attempt_id: str
    status: AttemptStatus
    record: dict[str, Any]

    @property
    def started(self) -> str | None:
        return self.record.get("started")

    @property
    def finished(self) -> str | None:
        return self.record.get("finished")

    @property
    def duration_s(self) -> float | None:
        return self.record.get("duration_s")

    @property
    def error(self) -> str | None:
        return self.record.get("error")

    @property
    def exit_status(self) -> int | None:
        return self.record.get("exit_status")

    @property
    def host(self) -> str | None:
        return self.record.get("host")

    @property
    def executor(self) -> str | None:
        """What ran it (`local`, `ray`); None in a record written before it was recorded."""
        return self.record.get("executor")

    def where(self, short: bool = False) -> str:
        """Where it ran (machines.py): its executor and machines, or, in a record that does
        not say, its builder's host as before."""
        return where_text(self.record, short) or self.host or "?"

    @property
    def user(self) -> str | None:
        return self.record.get("user")

    @property
    def invocation(self) -> str | None:
        return self.record.get("invocation")

    @property
    def aside(self) -> str | None:
        """Why a run was made aside and never published (`rerun --check`), if it was."""
        return self.record.get("aside")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AttemptRecord:
        return cls(data["key"], data["label"], data["attempt"], AttemptStatus(data["status"]), data)

    def to_json(self) -> dict[str, Any]:
        return dict(self.record)


def read_attempt(store: Store, key: str, attempt_id: str) -> AttemptRecord | None:
    """One attempt record; None if it is gone (`cache gc` removes a dead key's attempts) or unreadable."""
    records = Records(store)
    data = records.read_attempt(key, attempt_id)
    if data is None:
        return None
    try:
        record = AttemptRecord.from_json(data)
    except (ValueError, KeyError, TypeError):
        return None
    # A builder records its attempt's end while it still holds the key's lease, so a
    # record still `running` at a key nobody holds belongs to a builder that died.
    if record.status is AttemptStatus.RUNNING and records.key_holder(key) is None:
        return AttemptRecord.from_json({**record.record, "status": AttemptStatus.ABANDONED.value})
    return record


def key_attempts(store: Store, key: str) -> list[AttemptRecord]:
    """Every attempt at `key`, oldest first."""
    ids = Records(store).attempt_ids(key)
    return [record for attempt_id in ids if (record := read_attempt(store, key, attempt_id)) is not None]


def last_attempt(store: Store, key: str) -> AttemptRecord | None:
    """The newest attempt at `key`, if any."""
    ids = Records(store).attempt_ids(key)
    return read_attempt(store, key, ids[-1]) if ids else None


def label_attempts(store: Store, label: str) -> list[AttemptRecord]:
    """Every attempt at any key of `label` (a canonical `//pkg:name`), oldest first."""
    found = []
    for attempt_id, key in Records(store).label_attempts(label):
        record = read_attempt(store, key, attempt_id)
        if record is not None and record.label == label:
            found.append(record)
    return found


def read_log(store: Store, record: AttemptRecord) -> str | None:
    """The attempt's log: from the store once it finished; while it runs, from its staging
    directory where that is readable here (a local or shared store, or this machine)."""
    records = Records(store)
    data = records.read_log(record.key, record.attempt_id)
    if data is None and record.status is AttemptStatus.RUNNING:
        staged = records.running_log_file(record.attempt_id)
        data = staged.read_bytes() if staged.is_file() else None
    return None if data is None else data.decode(errors="replace")
