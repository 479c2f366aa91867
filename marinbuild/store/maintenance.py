"""Looking after a store: re-verify entries, collect garbage, count what is there.

Garbage collection works per key (its entry, outputs, attempts, scratch, and the label
index's pointers to its attempts) and is
conservative: a key is kept if the workspace's current recipes produce it, if it is
pinned (`pins/<key>`), if an invocation younger than the grace period built or used
it, if its lease is held right now, if a step running now (its lease held) reads it, or
if it is a kept state (a checkpoint) or a shard unit that the entry of a key kept for
any of these reasons names; otherwise it is swept once its newest activity (the entry's publication,
else its newest attempt) is older than the grace period.
The entry is deleted first, so that at no moment does an entry point at missing files.

It also removes the records of builds older than the grace period that the caller names
as superseded (provenance/in_use.py: builds that ran nothing and whose every target a
newer build of the same workspace recorded again), with their event streams.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import os
import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from marinbuild.errors import StoreReadOnly
from marinbuild.store import layout
from marinbuild.store.action_cache import ActionCache
from marinbuild.store.base import ObjectStat, Store
from marinbuild.store.entries import AttemptStatus, CacheEntry, attempt_id_time, new_attempt_id
from marinbuild.store.records import Records

_ENTRY_TIME = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Mismatch:
    key: str
    label: str
    problem: str


@dataclass
class GcReport:
    removed: dict[str, int] = field(default_factory=dict)  # key -> bytes
    bytes_by_experiment: Counter[str] = field(default_factory=Counter)
    kept_held: int = 0
    kept_young: int = 0
    staging_removed: dict[str, int] = field(default_factory=dict)  # attempt id -> bytes
    records_removed: dict[str, int] = field(default_factory=dict)  # invocation id -> bytes


@dataclass(frozen=True)
class Leftover:
    """The staging directory of an attempt whose builder is gone (killed, crashed)."""

    attempt_id: str
    path: Path
    bytes: int


@dataclass(frozen=True)
class StoreStats:
    keys: int
    entries: int
    objects_by_area: dict[str, int]
    bytes_by_area: dict[str, int]
    leases_held: int
    leftovers: list[Leftover]  # staging directories left by killed builders (`cache gc` removes them)
    # Entries copied in from mirrors (store/mirrors.py): (from region, to region) -> [entries, bytes].
    copied: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)


def _parse_time(text: str, form: str) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(text, form)))
    except ValueError:
        return None


def _by_key(objects: dict[str, ObjectStat]) -> dict[str, dict[str, ObjectStat]]:
    grouped: dict[str, dict[str, ObjectStat]] = defaultdict(dict)
    for path, stat in objects.items():
        key = layout.key_of(path)
        if key is not None:
            grouped[key][path] = stat
    return grouped


def verify(cache: ActionCache, keys: Iterable[str]) -> tuple[list[Mismatch], set[str], int]:
    """Re-hash every file of every entry of `keys` (downloading from a remote store); an
    entry with a mismatch is quarantined, so the next build rebuilds it (a look-up on a
    remote store lists no outputs: damage nobody has read stays until found here). The
    mismatches, the keys that could not be quarantined (a read-only store), and how many
    entries were verified (keys without one are skipped)."""
    found, kept, verified = [], set(), 0
    for key in keys:
        if not cache.store.exists(layout.entry(key)):
            continue  # nothing published under it (never built, or quarantined already)
        verified += 1
        entry, problems = cache.recheck(key)
        label = entry.label if isinstance(entry, CacheEntry) else "?"
        found.extend(Mismatch(key, label, problem) for problem in problems)
        if problems:
            try:
                cache.quarantine(key, new_attempt_id())
            except StoreReadOnly:
                kept.add(key)
    return found, kept, verified


def entry_keys(store: Store) -> list[str]:
    return sorted(key for path in store.list("ac") if (key := layout.key_of(path)) is not None)


def _recent_invocation_keys(store: Store, since: float) -> set[str]:
    keys: set[str] = set()
    for path in store.list("invocations"):
        if not path.endswith(".json"):
            continue  # an event stream
        started = attempt_id_time(path.removeprefix("invocations/"))
        if started is not None and started < since:
            continue
        data = store.read_bytes(path)
        try:
            record = json.loads(data) if data is not None else {}
        except ValueError:
            continue
        keys.update(target["key"] for target in record.get("targets", []) if target.get("key"))
    return keys


def _read_by_running_steps(cache: ActionCache, objects: dict[str, dict[str, ObjectStat]]) -> set[str]:
    """The keys of the inputs of every step running now (its key's lease held, its attempt
    recorded as running): an evaluation reading a checkpoint that its run, still training,
    published has no other claim on it until a build records it."""
    keys: set[str] = set()
    for key, paths in objects.items():
        if layout.lock(key) not in paths or cache.store.lease_holder(layout.lock(key)) is None:
            continue  # a lease object exists only while held, a local store's lock file for good
        running = [
            p.rsplit("/", 1)[1].removesuffix(".json")
            for p in paths
            if p.startswith("attempts/") and p.endswith(".json")
        ]
        for attempt_id in running:
            record = cache.records.read_attempt(key, attempt_id) or {}
            if record.get("status") == AttemptStatus.RUNNING.value:
                keys.update(str(item["key"]) for item in record.get("inputs", {}).values() if item.get("key"))
    return keys


def _kept_states_named(cache: ActionCache, keys: list[str]) -> set[str]:
    """The keys of the kept states (checkpoints) and of the shard units that the entries of
    `keys` name: they stay as long as the entry of the step that kept or mapped them does."""
    with ThreadPoolExecutor(max_workers=max(1, min(len(keys), cache.store.lookup_concurrency))) as pool:
        entries = list(pool.map(cache.read_entry, keys))
    return {
        str(key)
        for entry in entries
        if isinstance(entry, CacheEntry)
        for key in [*(entry.provenance.get("checkpoints") or {}).values(), *(entry.provenance.get("shards") or [])]
    }


def _last_activity(cache: ActionCache, key: str, paths: Iterable[str]) -> tuple[float | None, str]:
    """When the key was last published or attempted, and its experiment (package)."""
    entry = cache.read_entry(key)
    if isinstance(entry, CacheEntry):
        experiment = entry.label.partition(":")[0]  # the package: `//exp/tutorial`
        return _parse_time(str(entry.provenance.get("finished", "")), _ENTRY_TIME), experiment
    attempts = [path.rsplit("/", 1)[1] for path in paths if path.startswith("attempts/")]
    times = [t for t in (attempt_id_time(name) for name in attempts) if t is not None]
    return (max(times) if times else None), "(no entry)"


def collect_garbage(
    cache: ActionCache, live: set[str], grace_s: float, dry_run: bool, superseded: Iterable[str] = ()
) -> GcReport:
    """Sweep what `live`, pins, recent invocations and held leases leave, and the records
    of the `superseded` invocations older than the grace period."""
    store = cache.store
    now = time.time()
    tree = store.stat_tree("")
    objects = _by_key(tree)
    keep = live | {path.removeprefix("pins/") for path in store.list("pins")}
    keep |= _recent_invocation_keys(store, now - grace_s)
    keep |= _read_by_running_steps(cache, objects)
    report = GcReport()
    swept: dict[str, str] = {}  # key -> its experiment
    for key, paths in sorted(objects.items()):
        if key in keep:
            continue
        if store.lease_holder(layout.lock(key)) is not None:
            report.kept_held += 1
            continue
        last, experiment = _last_activity(cache, key, paths)
        if last is not None and last > now - grace_s:
            report.kept_young += 1
            continue
        swept[key] = experiment
    staying = [key for key, paths in objects.items() if key not in swept and layout.entry(key) in paths]
    for key in _kept_states_named(cache, staying):
        swept.pop(key, None)
    for key, experiment in swept.items():
        size = sum(stat.size for stat in objects[key].values())
        report.removed[key] = size
        report.bytes_by_experiment[experiment] += size
        if not dry_run:
            store.delete(layout.entry(key))  # first: no entry ever points at missing files
            for area in (layout.output(key), layout.attempts(key), layout.scratch(key)):
                store.delete(area)
    if report.removed and not dry_run:
        _sweep_label_index(store, set(report.removed))
    for invocation_id in superseded:
        started = attempt_id_time(invocation_id)
        if started is None or started >= now - grace_s:
            continue
        paths = [p for p in (layout.invocation(invocation_id), layout.invocation_events(invocation_id)) if p in tree]
        report.records_removed[invocation_id] = sum(tree[path].size for path in paths)
        if not dry_run:
            for path in paths:
                store.delete(path)
    for leftover in leftover_staging(store, now - grace_s):
        report.staging_removed[leftover.attempt_id] = leftover.bytes
        if not dry_run:
            shutil.rmtree(leftover.path, ignore_errors=True)
    return report


def leftover_staging(store: Store, before: float = float("inf")) -> list[Leftover]:
    """Staging directories (`tmp/<attempt id>/`, on this machine for a remote store) that
    no running attempt uses: untouched since `before`, and — for an attempt the label
    index knows — its key's lease held by nobody. A long training keeps its lease, so it
    is never swept, however old its attempt."""
    root = store.local_path(layout.staging(""))
    if not root.is_dir():
        return []
    keys = {
        name.partition(".")[0]: name.partition(".")[2] for name in (p.rsplit("/", 1)[1] for p in store.list("labels"))
    }
    found = []
    for directory in sorted(root.iterdir()):
        if not directory.is_dir():
            continue
        newest, size = _newest_and_size(directory)
        if newest >= before:
            continue
        key = keys.get(directory.name)
        if key is not None and store.lease_holder(layout.lock(key)) is not None:
            continue
        found.append(Leftover(directory.name, directory, size))
    return found


def _newest_and_size(directory: Path) -> tuple[float, int]:
    newest, size = directory.stat().st_mtime, 0
    for parent, _subdirectories, files in os.walk(directory):
        newest = max(newest, os.stat(parent).st_mtime)
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                status = os.lstat(os.path.join(parent, name))
                newest, size = max(newest, status.st_mtime), size + status.st_size
    return newest, size


def _sweep_label_index(store: Store, removed: set[str]) -> None:
    """Drop the per-label index's pointers (`labels/<digest>/<attempt>.<key>`) to attempts
    of removed keys: they would dangle."""
    for path in store.list("labels"):
        if path.rsplit(".", 1)[-1] in removed:
            store.delete(path)


def stats(store: Store) -> StoreStats:
    objects = store.stat_tree("")
    by_area: Counter[str] = Counter()
    bytes_by_area: Counter[str] = Counter()
    for path, stat in objects.items():
        area = path.split("/", 1)[0]
        by_area[area] += 1
        bytes_by_area[area] += stat.size
    keys = _by_key(objects)
    entries = sum(1 for path in objects if path.startswith("ac/"))
    held = sum(1 for path in objects if path.startswith("locks/") and store.lease_holder(path) is not None)
    copied: dict[tuple[str, str], tuple[int, int]] = {}
    if "copies" in by_area:
        for record in Records(store).copies():
            pair = (str(record.get("from_region")), str(record.get("to_region")))
            count, size = copied.get(pair, (0, 0))
            copied[pair] = (count + 1, size + int(record.get("bytes", 0)))
    return StoreStats(len(keys), entries, dict(by_area), dict(bytes_by_area), held, leftover_staging(store), copied)
