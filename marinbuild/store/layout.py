"""Where things live inside a store. One module, so the layout is written down once.

Every name is a '/'-separated path relative to the store root, sharded by the first two
hex digits of the key so that no directory (or GCS prefix) grows huge or hot.

    store.json                          format and salt of the store
    ac/<kk>/<key>.json                  action-cache entry, created once, never rewritten
    out/<kk>/<key>/...                  the outputs of a published entry
    attempts/<kk>/<key>/<id>.json|.log  every attempt (failures too) and its log
    labels/<ld>/<id>.<key>              an index of the attempts of one label (ld: its digest)
    blobs/<dd>/<digest>                 source files read by built steps, by content (for rerun)
    invocations/<id>.json               one record per build command
    invocations/<id>.events.jsonl       its event stream (actions/bookkeeping/events.py)
    scratch/<kk>/<key>/                 stable per-key scratch for resumable rules
    locks/<kk>/<key>.lock               leases: one runner per key at a time
    pins/<key>                          keys `cache gc` keeps whatever the workspace says
    tmp/<id>/                           staging of running attempts (never read as output)
    tmp/<id>/log.txt                    the log of a running attempt, as it is written
    quarantine/<key>.<id>.json          entries found corrupt, moved aside before a rebuild
    checks/<key>/<id>/                  a step run again aside by `rerun --check` (kept if it differs)
    listings/<dd>/<digest>.json         listings of pinned external artifacts (`marinbuild pin`)
    copies/<kk>/<key>.json              where an entry copied from a mirror came from (store/mirrors.py)
"""

from __future__ import annotations

from marinbuild.hashing import digest_bytes

METADATA = "store.json"


def _shard(key: str) -> str:
    return f"{key[:2]}/{key}"


def entry(key: str) -> str:
    return f"ac/{_shard(key)}.json"


def output(key: str) -> str:
    return f"out/{_shard(key)}"


def attempts(key: str) -> str:
    return f"attempts/{_shard(key)}"


def attempt_record(key: str, attempt_id: str) -> str:
    return f"{attempts(key)}/{attempt_id}.json"


def attempt_log(key: str, attempt_id: str) -> str:
    return f"{attempts(key)}/{attempt_id}.log"


def label_attempts(label: str) -> str:
    """The index of a label's attempts: a label is not a path, so it is named by its digest."""
    return f"labels/{digest_bytes(label.encode())[:32]}"


def label_attempt(label: str, attempt_id: str, key: str) -> str:
    return f"{label_attempts(label)}/{attempt_id}.{key}"


def invocation_events(invocation_id: str) -> str:
    return f"invocations/{invocation_id}.events.jsonl"


def blob(digest: str) -> str:
    return f"blobs/{_shard(digest)}"


def invocation(invocation_id: str) -> str:
    return f"invocations/{invocation_id}.json"


def scratch(key: str) -> str:
    return f"scratch/{_shard(key)}"


def lock(key: str) -> str:
    return f"locks/{_shard(key)}.lock"


def pin(key: str) -> str:
    return f"pins/{key}"


# The areas that belong to one key, as `cache gc` sweeps them.
KEYED_AREAS = ("ac", "out", "attempts", "scratch", "locks")


def key_of(path: str) -> str | None:
    """The key a stored path belongs to (`ac/ab/<key>.json`, `out/ab/<key>/...`), if any."""
    parts = path.split("/", 3)
    if len(parts) < 3 or parts[0] not in KEYED_AREAS:
        return None
    return parts[2].split(".", 1)[0]


def staging(attempt_id: str) -> str:
    return f"tmp/{attempt_id}"


STAGING_LOG = "log.txt"  # a running attempt's log, inside its staging directory
# Made beside `out` just before its files are hashed (hashing.clock_mark): the file system's
# time then, which tells which outputs' digests need no racy-window wait.
STAGING_MARK = "hashing.mark"


def staging_log(attempt_id: str) -> str:
    return f"{staging(attempt_id)}/{STAGING_LOG}"


def check(key: str, attempt_id: str) -> str:
    return f"checks/{key}/{attempt_id}"


def listing(digest: str) -> str:
    return f"listings/{_shard(digest)}.json"


def quarantine(key: str, attempt_id: str) -> str:
    return f"quarantine/{key}.{attempt_id}.json"


def copy_record(key: str) -> str:
    return f"copies/{_shard(key)}.json"


# What builds write for themselves and no build's decision reads: their records, leases and
# staging (a no-op certificate leaves them out of what a build consulted).
BOOKKEEPING_AREAS = ("invocations", "locks", "tmp")
