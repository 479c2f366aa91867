"""A store in several regions: the bucket of this builder's region, and mirrors elsewhere.

A team that trains in two regions keeps a bucket in each (`store =
"gs://team-us-central2/mb"`, `mirrors = ["gs://team-eu-west4/mb"]`): steps then read
token caches and checkpoints in their own region, where reading costs nothing. Keys hold
no location, so an entry is valid in every bucket; the buckets only have to share the
store's salt (`store.json`), which enters every key.

- **Which bucket is local.** The one in the builder's region (the `region` setting or
  `MARINBUILD_REGION`, compared with the location GCS reports for each bucket); without a
  region, the store's own bucket. Every look-up, publication, record and step uses it;
  steps that read URLs get its URLs only.
- **Mirrors are asked only for what is missing here**, after the local look-ups, so a
  no-op build sends them nothing; many keys at once are answered by one listing of a
  mirror's `ac/` (a page per thousand entries), as for the local bucket.
- **A mirror's entry is verified where it lies** — it names its key, its recipe hashes
  to it, its tree digest is its manifest's, and a listing of its outputs shows exactly
  its files with their sizes and the CRC32C its entry recorded — so a corrupt one is
  reported and never copied, and the key is built here instead.
- **Copying is publishing**: under the key's lease, the outputs are rewritten into the
  local bucket by GCS (no byte passes through this machine), listed back and compared
  with the mirror's (same names, sizes, CRC32C), and only then is the entry created,
  create-only, with exactly the bytes that were verified. A copy killed half-way leaves
  outputs without an entry, never an entry without its outputs.
- **Commands that only read** (`show`, `where`, `explain`, `query`, the report) look
  the mirrors up as a build does (`Mirrors.find`: the same batching, the same
  verification) and say where a target lives and what a copy would move; they read a
  mirror's entries and listings only, never an output byte, and write nothing anywhere.
- **What it cost** is kept in `copies/<kk>/<key>.json` (from where, which regions, how
  many bytes, when, by whom): `show` prints it, `cache stats` sums bytes per region pair.

The egress budget (how many bytes a build may copy across regions) is the scheduler's to
enforce: it knows which copies one build makes (`actions/execution/mirror_copies.py`).
"""

from __future__ import annotations

import dataclasses
import getpass
import socket
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from marinbuild.errors import StoreError
from marinbuild.hashing import StatCache
from marinbuild.memo import Memo
from marinbuild.store import layout, open_store, store_salt
from marinbuild.store.action_cache import LISTING_PAYS_FROM, ActionCache
from marinbuild.store.base import ObjectStat, Store, StoreSpec
from marinbuild.store.entries import CacheEntry, Outputs, verify_entry

if TYPE_CHECKING:
    from marinbuild.store.gcs import GCSStore

REGION_ENV = "MARINBUILD_REGION"


def format_bytes(size: float) -> str:
    """Bytes as a person reads a cloud bill: decimal units (the budget is in GB)."""
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1000
    return str(size)


@dataclass(frozen=True)
class MirrorHit:
    """An entry of a key the local bucket lacks, found and verified in a mirror, not yet
    copied: `data` are the entry's bytes as verified (created as they are), `stored` the
    listing of its outputs there (a copy must list the same)."""

    key: str
    entry: CacheEntry
    data: bytes
    mirror: GCSStore
    stored: dict[str, ObjectStat]
    source_region: str
    region: str  # the local bucket's
    # The entries of the states this one's step kept (its provenance's `checkpoints`) that
    # the local bucket lacks, verified in the same mirror: the entry is whole only with
    # them (ActionCache.lookup), so they are copied with it, and counted in its bytes.
    kept: tuple[MirrorHit, ...] = ()

    @property
    def source(self) -> str:
        return self.mirror.url

    @property
    def bytes(self) -> int:
        return self.entry.manifest.total_bytes + sum(state.bytes for state in self.kept)

    @property
    def entries(self) -> int:
        """How many entries copying it creates: its own and its kept states'."""
        return 1 + len(self.kept)

    def kept_state(self, key: str) -> MirrorHit | None:
        """The hit of the kept state `key` copied with this one (None if it is not)."""
        return next((state for state in self.kept if state.key == key), None)

    @property
    def crosses_regions(self) -> bool:
        """Copies within one region cost no egress, and are not counted against the budget."""
        return self.source_region != self.region

    @property
    def output_url(self) -> str:
        """Where its outputs are, in the mirror."""
        return self.mirror.location(layout.output(self.key))

    def describe(self) -> str:
        """`gs://team-eu-west4/mb (europe-west4 → us-central2), 1.2 GB`."""
        return f"{self.source} ({self.source_region} → {self.region}), {format_bytes(self.bytes)}"

    def elsewhere(self) -> str:
        """What a read command says of a target built only in a mirror: where it is, and
        what a build here would cost (`show`, `where`, `explain`, the report)."""
        move = "across regions (cross-region egress)" if self.crosses_regions else f"within {self.region} (no egress)"
        return (
            f"built in {self.source} ({self.source_region}), not yet in this builder's bucket ({self.region}): "
            f"a build here would copy {format_bytes(self.bytes)} {move}"
        )

    def to_json(self) -> dict[str, object]:
        """Where the entry lives, for `show --json`: `bytes` cross regions if `crosses_regions`."""
        return {
            "in": self.source,
            "region": self.source_region,
            "output": self.output_url,
            "to_region": self.region,
            "bytes": self.bytes,
            "crosses_regions": self.crosses_regions,
        }


def budget_line(hits: Sequence[MirrorHit], budget_gb: float, allowed: bool, setting: str) -> str | None:
    """The line a dry run ends with when a build would copy from mirrors: how much would
    cross regions against the egress budget, and whether the build would stop over it
    (with the real build's hint). None when nothing would be copied."""
    if not hits:
        return None
    crossing = [hit for hit in hits if hit.crosses_regions]
    total = sum(hit.bytes for hit in crossing)
    entries = sum(hit.entries for hit in hits)
    copies = f"copying {entries} entries from mirrors would move {format_bytes(total)} across regions"
    budget = f"this build's egress budget of {format_bytes(budget_gb * 1e9)}"
    if allowed:
        return f"{copies} (--allow-egress: {budget} does not apply)"
    if total > budget_gb * 1e9:
        return (
            f"{copies}, over {budget}: a build stops before copying (exit 2); "
            f"pass --allow-egress to copy them anyway, or raise {setting}"
        )
    return f"{copies}, within {budget}"


class BucketRegions:
    """Where each bucket is, as GCS reports it, remembered on this machine: a bucket's
    location never changes, so it is asked once per bucket, not once per build."""

    def __init__(self, memo: Memo):
        self.memo = memo

    def of(self, store: GCSStore) -> str:
        found = self.memo.get(store.bucket)
        if found is None:
            found = store.bucket_location()
            self.memo.put(store.bucket, found)
            self.memo.save()
        return str(found)


def arrange(
    spec: StoreSpec,
    mirrors: Sequence[str],
    region: str | None,
    machine_dir: Path,
    stat_cache: StatCache,
    regions: BucketRegions,
) -> tuple[Store, list[GCSStore]]:
    """The local store and its mirrors, among the store and the `mirrors` setting.

    Without a region the store's bucket is local; with one (the setting, or
    MARINBUILD_REGION), the first bucket GCS places in that region. Mirrors apply to a
    gs:// store only (copies are GCS rewrites): another store has none."""
    from marinbuild.store.gcs import GCSStore

    store = open_store(spec, machine_dir, stat_cache)
    if not mirrors or not isinstance(store, GCSStore):
        return store, []
    buckets: list[GCSStore] = [store]
    for url in mirrors:
        if url.rstrip("/") not in [bucket.url for bucket in buckets]:
            opened = open_store(dataclasses.replace(spec, url=url), machine_dir)
            assert isinstance(opened, GCSStore)
            buckets.append(opened)
    if region is None:
        return store, buckets[1:]
    wanted = region.lower()
    for bucket in buckets:
        if regions.of(bucket) == wanted:
            return bucket, [other for other in buckets if other is not bucket]
    where = ", ".join(f"{bucket.url} ({regions.of(bucket)})" for bucket in buckets)
    raise StoreError(
        f"none of the store's buckets is in {region}, this builder's region: {where}",
        hint=f"add a bucket in {region} to 'mirrors' (a copy of the same store), or set 'region' "
        f"(or {REGION_ENV}) to where this builder runs",
    )


def _files_problem(entry: CacheEntry, stored: dict[str, ObjectStat], expected: dict[str, ObjectStat]) -> str | None:
    """Why the objects `stored` under an entry's output are not exactly its files: every
    file of its manifest, nothing else, each of its size and of the checksum `expected`
    (the entry's own, or the listing a copy was made from)."""
    listed = {item.path: item for item in entry.manifest.files}
    missing = sorted(listed.keys() - stored.keys())
    if missing:
        return f"output file {missing[0]} is missing"
    extra = sorted(stored.keys() - listed.keys())
    if extra:
        return f"output file {extra[0]} is not in the manifest"
    for name, item in listed.items():
        if stored[name].size != item.size:
            return f"output file {name} has {stored[name].size:,} bytes, its manifest says {item.size:,}"
        want = expected.get(name)
        if want is not None and want.checksum is not None and stored[name].checksum != want.checksum:
            return f"output file {name} does not match its recorded checksum (corrupt)"
    return None


class Mirrors:
    """The mirrors of the local bucket that `cache` looks up, asked for keys it lacks."""

    def __init__(self, cache: ActionCache, mirrors: Sequence[GCSStore], regions: BucketRegions):
        from marinbuild.store.gcs import GCSStore

        if not isinstance(cache.store, GCSStore):
            raise TypeError(f"mirrors need a gs:// store, not {cache.store.url}")  # `arrange` sees to it
        self.cache = cache
        self.local: GCSStore = cache.store
        self.mirrors = list(mirrors)
        self.regions = regions
        self._listed: dict[str, set[str]] = {}  # per mirror: its entries' paths, listed once
        # What was found for each key asked (None: in no mirror, or only corrupt there): a
        # build's look-ahead and its run ask the same keys, and mirrors are asked once.
        self._found: dict[str, MirrorHit | None] = {}
        self._salted: set[str] = set()  # mirrors whose salt was found to be the local one

    def _check_salt(self, mirror: GCSStore) -> None:
        """A mirror must be a copy of the same store: with another salt its keys never
        match, and every look-up would ask it in vain."""
        if mirror.url in self._salted:
            return
        local, theirs = store_salt(self.local), store_salt(mirror)
        if local != theirs:
            raise StoreError(
                f"mirror {mirror.url} has the salt {theirs!r} and the store {self.local.url} {local!r}: "
                "their keys never match",
                hint="a mirror holds a copy of the same store: give it the store's store.json, "
                "or remove it from 'mirrors'",
            )
        self._salted.add(mirror.url)

    def hit(self, key: str) -> MirrorHit | None:
        """The verified entry of one key missing here, in the first mirror holding one; a
        key a build or a dry run already asked about costs no request."""
        return self.find([key])[0].get(key)

    def find(self, keys: Sequence[str]) -> tuple[dict[str, MirrorHit], list[str]]:
        """The verified entries of `keys` (missing locally) in the mirrors, the first
        mirror's first; and what was wrong with those that failed verification (they are
        never copied, and the key is built here)."""
        hits = {key: hit for key in keys if (hit := self._found.get(key)) is not None}
        asked = [key for key in keys if key not in self._found]
        problems: list[str] = []
        for mirror in self.mirrors:
            wanted = [key for key in asked if key not in hits]
            if not wanted:
                break
            self._check_salt(mirror)
            if len(wanted) >= LISTING_PAYS_FROM or mirror.url in self._listed:
                if mirror.url not in self._listed:
                    self._listed[mirror.url] = set(mirror.list("ac"))
                wanted = [key for key in wanted if layout.entry(key) in self._listed[mirror.url]]
            if not wanted:
                continue
            workers = min(len(wanted), mirror.lookup_concurrency)
            with ThreadPoolExecutor(max_workers=workers) as pool:
                for key, found in zip(wanted, pool.map(partial(self._verified, mirror), wanted)):
                    if isinstance(found, MirrorHit):
                        hits[key] = found
                    elif found is not None:
                        problems.append(found)
        self._found.update((key, hits.get(key)) for key in asked)
        return hits, problems

    def _verified(self, mirror: GCSStore, key: str, whole: bool = True) -> MirrorHit | str | None:
        """The entry of `key` in `mirror` if it verifies there, what is wrong with it, or
        None if the mirror has none. Two requests: the entry, and a listing of its outputs;
        and as many for each state it names as kept that the local bucket lacks (`whole`;
        a kept state's own names are not followed: it keeps nothing)."""
        data = mirror.read_bytes(layout.entry(key))
        if data is None:
            return None
        entry = verify_entry(key, data, mirror.location(layout.entry(key)))
        if isinstance(entry, str):
            return entry
        stored = mirror.stat_tree(layout.output(key))
        recorded = {name: ObjectStat(0, checksum) for name, checksum in entry.checksums.items()}
        problem = _files_problem(entry, stored, recorded)
        if problem is not None:
            return f"the entry of {key[:12]} in {mirror.url} does not match its files: {problem}"
        kept: list[MirrorHit] = []
        for step, state in (entry.provenance.get("checkpoints", {}) if whole else {}).items():
            if self.cache.lookup(state).outputs is not None:
                continue  # here already
            found = self._verified(mirror, state, whole=False)
            if not isinstance(found, MirrorHit):
                return (
                    f"the entry of {key[:12]} in {mirror.url} names its checkpoint at step {step} ({state[:12]}), "
                    + (found or "which the mirror lacks")
                )
            kept.append(found)
        return MirrorHit(
            key, entry, data, mirror, stored, self.regions.of(mirror), self.regions.of(self.local), tuple(kept)
        )

    def outputs(self, hit: MirrorHit) -> Outputs:
        """A hit's outputs as they will be once copied: dependents' keys are made of them
        before the copy (the budget is checked for all copies a build foresees at once)."""
        entry = hit.entry
        return Outputs(
            hit.key,
            entry.tree_digest,
            entry.manifest,
            self.cache.output_dir(hit.key),
            entry.provenance.get("rule_code"),
        )

    def copy(self, hit: MirrorHit) -> Outputs:
        """Copy a verified entry into the local bucket as a publication: under the key's
        lease, outputs first (rewritten by GCS, listed back, compared), the entry last,
        create-only; then where it came from. The local entry is looked up again before
        anything moves: another builder may have copied or built it meanwhile. The states
        it kept are copied first, each the same way: its entry is whole only with them."""
        for state in hit.kept:
            self.copy(state)
        cache, local, key = self.cache, self.local, hit.key
        with cache.lease(key):
            found = cache.lookup(key)
            if found.outputs is not None:
                return found.outputs
            out = layout.output(key)
            paths = {f"{out}/{item.path}": f"{out}/{item.path}" for item in hit.entry.manifest.files}
            try:
                local.rewrite_from(hit.mirror, paths, hit.entry.manifest.total_bytes)
            except FileNotFoundError as gone:
                problem: str | None = f"{gone} vanished from the mirror during the copy"
            else:
                problem = _files_problem(hit.entry, local.stat_tree(out), hit.stored)
            if problem is not None:
                local.delete(out)
                raise StoreError(
                    f"the copy of {hit.entry.label} ({key[:12]}) from {hit.source} did not verify: {problem}; "
                    "nothing was published",
                    hint="build again (the mirror's objects may have changed during the copy)",
                )
            cache.create_entry(key, hit.data, hit.entry.tree_digest)
            cache.records.write_copy(
                {
                    "key": key,
                    "label": hit.entry.label,
                    "from": hit.source,
                    "from_region": hit.source_region,
                    "to": local.url,
                    "to_region": hit.region,
                    "bytes": hit.entry.manifest.total_bytes,  # its kept states have records of their own
                    "copied": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "by": f"{getpass.getuser()}@{socket.gethostname()}",
                }
            )
        copied = cache.lookup(key)
        if copied.outputs is None:
            raise StoreError(f"the entry of {key[:12]} copied into {local.url} does not verify: {copied.problem}")
        return copied.outputs
