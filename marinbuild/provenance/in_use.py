"""What the workspaces sharing a store still use, as their builds recorded it.

`cache gc` keeps what this workspace's current recipes produce; on a store several
workspaces share (a team's bucket, teammates' checkouts at other commits, a cluster's
driver) that is not enough: a key only a teammate's workspace produces must not go.
Every build writes an invocation record naming each target it built or found cached
with its key, and where it ran (host, workspace). So for each workspace the store has
heard of, the key its newest build recorded for each target is the output that
workspace still uses — until it builds that target again under another recipe, which
supersedes it. Those keys are what `workspaces_in_use` returns; `cache gc` keeps them.

What no invocation records is not protected: an output only ever read (a notebook's
`marinbuild.output()`, a read-only reader's cached build, which is not recorded), or a
workspace whose builds were never recorded. Pin those (`pins/<key>`).

The same reading finds the records that add nothing to this: a build that found every
target cached, each of whose targets a newer build of the same workspace recorded again.
A researcher's daily no-ops are nearly all such records (one per command, listing every
target: megabytes per build of 10,000 targets), so `cache gc` removes them once they are
older than its grace period; records of builds that ran, failed or were cut short stay.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from marinbuild.store import Records, Store, attempt_id_time

# Target statuses that say the workspace used the key's output.
_USED = ("built", "cached")


@dataclass
class InUse:
    """The keys the store's workspaces use, and how many workspaces and builds say so."""

    keys: set[str] = field(default_factory=set)
    workspaces: set[tuple[str, str]] = field(default_factory=set)  # (host, workspace root)
    invocations: int = 0
    superseded: list[str] = field(default_factory=list)  # ids of all-cached builds that add no key


def workspace_of(record: dict) -> tuple[str, str]:
    """Where a build ran: its host and workspace root (records before marinbuild wrote the
    root name the directory the command ran in)."""
    return str(record.get("host", "?")), str(record.get("workspace") or record.get("cwd", "?"))


def workspaces_in_use(store: Store) -> InUse:
    """For each workspace that built into `store`, the key its newest build recorded for
    each target (built or cached there), and every key recorded for it in that build's
    second; and the all-cached builds whose every target a build of a later second
    recorded again. Ids are stamped to the second, and order the builds of one second by
    process id, which wraps: of two builds in one second, either may be the newer."""
    records = Records(store)
    found = InUse()
    newest: dict[tuple[tuple[str, str], str], tuple[float | None, str]] = {}  # (workspace, label) -> (second, key)
    tied: set[str] = set()  # other keys recorded for a target in the second of its newest
    for invocation_id in reversed(records.invocation_ids()):  # newest first
        record = records.read_invocation(invocation_id)
        if not isinstance(record, dict):
            continue
        found.invocations += 1
        workspace = workspace_of(record)
        found.workspaces.add(workspace)
        second = attempt_id_time(invocation_id)
        used = {
            (workspace, target.get("label")): target["key"]
            for target in record.get("targets", [])
            if target.get("key") and target.get("status") in _USED
        }
        recorded_later = True  # every target by a build of a later second
        for pair, key in used.items():
            found_second, found_key = newest.setdefault(pair, (second, key))
            if found_second == second:
                recorded_later = False
                if found_key != key:
                    tied.add(key)  # either may be the newer: keep both
        if used and recorded_later and _all_cached(record):
            found.superseded.append(invocation_id)
    found.keys = {key for _, key in newest.values()} | tied
    return found


def _all_cached(record: dict) -> bool:
    """A build that ended and found every target it planned in the cache: it ran nothing."""
    return record.get("result") == "succeeded" and all(
        target.get("status") == "cached" for target in record.get("targets", [])
    )
