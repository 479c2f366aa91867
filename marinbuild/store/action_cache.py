"""The action cache: key -> verified outputs, and the publish protocol that fills it.

Outputs are written and hashed in staging, moved into place, and only then is the entry
created, create-only. A reader trusts nothing without an entry, and verifies every file
of an entry against its manifest before serving it, so a crash at any point, a deleted
file or a flipped byte is a miss — reported, and rebuilt — never a wrong answer
(docs/guarantees.md, "A hit is the right bytes").

On a remote store the upload is verified against the backend's checksums, which the
entry records; a lookup compares them with one listing, and files are downloaded
(and BLAKE3-verified) only when a step reads them as local files.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from marinbuild.errors import OutputDamaged
from marinbuild.hashing import StatCache, canonical_json, digest_bytes, digest_file
from marinbuild.memo import Memo
from marinbuild.store import layout
from marinbuild.store.base import Lease, MirrorLookup, Signed, Store, WaitingFn
from marinbuild.store.entries import (
    Attempt,
    AttemptStatus,
    CacheEntry,
    Lookup,
    Outputs,
    Staging,
    Uploaded,
    new_attempt_id,
    verify_entry,
)
from marinbuild.store.manifest import FileEntry, Manifest
from marinbuild.store.records import Records

_PARALLEL_LOOKUPS = 32
# From this many keys to look up on, one listing of a store's entries (a page of a thousand
# per request on GCS) is cheaper than a request per key.
LISTING_PAYS_FROM = 32
# The metadata an entry is created with that listings show: the tree digest of its outputs,
# from which a reader foresees its dependents' keys before reading it (`read_ahead`).
TREE_HINT = "marinbuild-tree-digest"


class ActionCache:
    """Lookups verify every file of an entry; `memo` remembers entries already parsed and
    checked, trusted while the entry object's signature is unchanged (entries are never
    rewritten in place, so a replaced entry has a new signature)."""

    def __init__(self, store: Store, stat_cache: StatCache, memo: Memo):
        self.store = store
        self.stat_cache = stat_cache
        self.memo = memo
        self.records = Records(store)
        # Entries' signatures from one listing of the store (`list_entries`), for a store
        # where a request per key costs a round trip. Entries are created once and never
        # rewritten, so a listed one is there as listed; a key not listed is asked for.
        self._listed: dict[str, Signed] | None = None
        # Entries' bytes read together before their look-ups (`read_ahead`), each taken by
        # the look-up of its key and verified there like any entry read.
        self._read_ahead: dict[str, bytes] = {}
        # Buckets in other regions holding copies of this store, asked by a build for keys
        # missing here (store/mirrors.py); None: a store in one place.
        self.mirrors: MirrorLookup | None = None
        # False inside `entries_only`: look-ups verify entries, not their outputs' files.
        self._outputs_checked = True

    def output_dir(self, key: str) -> str:
        return self.store.location(layout.output(key))

    def local_dir(self, outputs: Outputs) -> Path:
        """The outputs as local files: in place on a local store, else copied by digest and
        BLAKE3-verified. Bytes found missing or damaged quarantine the entry (the next
        build rebuilds it) and raise OutputDamaged."""
        try:
            return self.store.outputs_dir(layout.output(outputs.key), outputs.manifest)
        except (FileNotFoundError, OutputDamaged) as error:
            problem = str(error) if isinstance(error, OutputDamaged) else f"{error.filename or error} is missing"
            self.quarantine(outputs.key, new_attempt_id())
            raise OutputDamaged(
                f"the output of {outputs.key[:12]} in {self.store.url} is damaged: {problem}; "
                "its entry was quarantined, and the next build rebuilds it",
                hint="run the build again",
            ) from None

    def read_output(self, key: str, item: FileEntry) -> bytes | None:
        """The bytes of one (small) output file of `key`, read whole and checked against
        its manifest entry; None if they are missing or not its own."""
        data = self.store.read_bytes(f"{layout.output(key)}/{item.path}")
        return data if data is not None and digest_bytes(data) == item.digest else None

    def lease(self, key: str, waiting: WaitingFn | None = None) -> contextlib.AbstractContextManager[Lease]:
        """Exclusive ownership of `key` among every builder sharing the store."""
        return self.store.lease(layout.lock(key), waiting)

    def keys_with_prefix(self, prefix: str) -> list[str]:
        """The keys with an entry whose hex starts with `prefix` (at least two digits)."""
        found = {path.rsplit("/", 1)[1].removesuffix(".json") for path in self.store.list(f"ac/{prefix[:2]}")}
        return sorted(key for key in found if key.startswith(prefix))

    def list_entries(self, keys: int) -> None:
        """Before looking up `keys` keys: list every entry's signature at once if that is
        cheaper, so that looking up thousands of keys costs a few requests, not thousands."""
        if keys >= LISTING_PAYS_FROM and self.store.lists_signatures and self._listed is None:
            self._listed = self.store.signatures("ac")

    def listed_tree(self, key: str) -> str | None:
        """The tree digest the listing shows beside `key`'s entry (None: not listed, or
        published without it). A hint, never trusted: it only tells which entries a build
        will read, and the entry read says what the outputs are."""
        listed = self._listed.get(layout.entry(key)) if self._listed is not None else None
        return None if listed is None else listed.metadata.get(TREE_HINT)

    def read_ahead(self, foresee: Callable[[], Sequence[str]]) -> None:
        """Read at once the listed entries of the keys `foresee` returns that this machine
        has not verified before, for their look-ups: a build foresees its keys from the
        listing's hints (`listed_tree`), so that a machine new to a store reads the entries
        of a whole graph in overlapping round trips rather than a round trip per level of
        the graph. Without a listing (a local store) nothing is foreseen: that costs a
        key per target."""
        if self._listed is None:
            return
        paths = dict.fromkeys(map(layout.entry, foresee()))  # a kept state's key may be foreseen twice
        unread = [path for path in paths if path in self._listed and not self._remembered(path)]
        self._read_ahead.update(self.store.read_many(unread))

    def _remembered(self, path: str) -> bool:
        """Whether the memo holds the entry at `path` as listed (always False unlisted)."""
        listed, remembered = self._listed.get(path) if self._listed is not None else None, self.memo.get(path)
        return listed is not None and remembered is not None and remembered[0] == listed.signature

    def _answered_here(self, key: str) -> bool:
        """Whether `key`'s entry is at hand, remembered or read ahead: its look-up then asks
        the store nothing (but for the entries of states its step kept, if not at hand)."""
        path = layout.entry(key)
        return path in self._read_ahead or self._remembered(path)

    @contextlib.contextmanager
    def entries_only(self) -> Iterator[None]:
        """Look-ups that verify each entry (its key, recipe and tree digest) but not its
        outputs' files, for a reader that checks every byte it reads against the manifest
        instead (`read_output`), as a remote store's look-ups are: `compare` of a sweep of
        1,000 runs reads two files of each run's 94, and checking them all is most of its time."""
        self._outputs_checked = False
        try:
            yield
        finally:
            self._outputs_checked = True

    def lookup(self, key: str) -> Lookup:
        """The verified outputs of `key`. An entry naming the states its step kept (its
        provenance's `checkpoints`, by step) is whole only with their entries: those hold
        the kept states' bytes, which its own output leaves out (docs/checkpoints.md)."""
        return self._lookup(key, whole=True)

    def _lookup(self, key: str, whole: bool) -> Lookup:
        path = layout.entry(key)
        listed = self._listed.get(path) if self._listed is not None else None
        signature = self.store.signature(path) if listed is None else listed.signature
        if signature is None:
            return Lookup(None)
        remembered = self.memo.get(path)
        if remembered is not None and remembered[0] == signature:
            tree_digest, files, checksums, rule_code, kept = remembered[1:]
            manifest = Manifest(tuple(itertools.starmap(FileEntry, files)))
        else:
            data = self._read_ahead.pop(path, None)
            parsed = self.read_entry(key) if data is None else verify_entry(key, data, path)
            if isinstance(parsed, str):
                return Lookup(None, parsed)
            tree_digest, manifest, checksums = parsed.tree_digest, parsed.manifest, parsed.checksums
            rule_code = parsed.provenance.get("rule_code")
            kept = parsed.provenance.get("checkpoints", {})
            self._remember(path, signature, parsed)
        output = layout.output(key)
        problem = self.store.verify_outputs(output, manifest, checksums) if self._outputs_checked else None
        if not problem and whole:
            problem = self._kept_problem(kept)
        if problem:
            return Lookup(None, problem)
        return Lookup(Outputs(key, tree_digest, manifest, self.store.location(output), rule_code))

    def _remember(self, path: str, signature: Hashable, entry: CacheEntry) -> None:
        """Keep what the verified entry at `path` says, under its signature: the next look-up
        of its key reads nothing while the signature holds."""
        files = [(f.path, f.digest, f.size) for f in entry.manifest.files]
        kept = entry.provenance.get("checkpoints", {})
        self.memo.put(
            path,
            (signature, entry.tree_digest, files, entry.checksums, entry.provenance.get("rule_code"), kept),
        )

    def _kept_problem(self, kept: dict[str, str]) -> str | None:
        """Why the entries of the states an entry names as kept are not all usable (None
        if they are). Their own names are not followed: a kept state keeps nothing."""
        for step, key in kept.items():
            found = self._lookup(key, whole=False)
            if found.outputs is None:
                why = f"cannot be used: {found.problem}" if found.problem else "has no entry"
                return f"the checkpoint it kept at step {step} ({key[:12]}) {why}"
        return None

    def lookup_many(self, keys: list[str]) -> list[Lookup]:
        """Look keys up together: those that ask the store concurrently on a remote store,
        so that round trips overlap rather than add up; the others here (threads cost more
        to start than such a look-up, and a no-op build looks up every level of its graph)."""
        asking = [key for key in keys if not self._answered_here(key)]
        workers = min(len(asking), self.store.lookup_concurrency)
        if workers < 2:
            return [self.lookup(key) for key in keys]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            asked = dict(zip(asking, pool.map(self.lookup, asking), strict=True))
        return [asked[key] if key in asked else self.lookup(key) for key in keys]

    def read_entry(self, key: str) -> CacheEntry | str:
        """The entry of `key`, or what is wrong with it.

        An entry verifies itself (`verify_entry`): it names the key it is filed
        under, its recipe hashes to that key, and its tree digest is its manifest's. So an
        entry copied under another key, by mistake or by a hostile teammate, is corrupt,
        never another target's output."""
        path = layout.entry(key)
        data = self.store.read_bytes(path)
        if data is None:
            return f"action-cache entry {path} vanished while being read"
        return verify_entry(key, data, path)

    def recheck(self, key: str) -> tuple[CacheEntry | str, list[str]]:
        """Re-hash every output file of `key`'s entry (no memo, no stat cache, no checksum
        shortcut; downloads from a remote store) and report every problem, not the first:
        files missing, altered, or present but not in the manifest."""
        entry = self.read_entry(key)
        if isinstance(entry, str):
            return entry, [entry]
        listed = [item.path for item in entry.manifest.files]
        unlisted = sorted(set(self.store.stat_tree(layout.output(key))) - set(listed))
        problems = [f"output file {name} is not in the manifest (added after publishing)" for name in unlisted]
        with self.store.local_copies(layout.output(key), listed) as files:
            for item in entry.manifest.files:
                if item.path not in files:
                    problems.append(f"output file {item.path} is missing from the store")
                elif digest_file(files[item.path]) != item.digest:
                    problems.append(f"output file {item.path} does not match its manifest (corrupt)")
        return entry, problems

    # -- running and publishing ----------------------------------------------------------

    def new_staging(self, attempt_id: str | None = None, path: str | None = None) -> Staging:
        """A fresh staging directory for a run (of the attempt `attempt_id`), at `path` in
        the store's layout if given."""
        name = path or layout.staging(attempt_id or new_attempt_id())
        return Staging.create(self.store.staging_dir(name))

    def start_attempt(self, key: str, label: str, info: dict[str, Any], aside: bool = False) -> Attempt:
        """Record a new attempt at `key` as running, with a fresh staging directory.

        `aside`: a run that is never published (`rerun --check`), staged where its outputs
        can be kept for comparison."""
        attempt_id = new_attempt_id()
        attempt = Attempt(
            key, label, attempt_id, self.new_staging(attempt_id, layout.check(key, attempt_id) if aside else None)
        )
        attempt.record = {
            "key": key,
            "label": label,
            "attempt": attempt_id,
            "status": AttemptStatus.RUNNING.value,
            **info,
        }
        self.records.write_attempt(attempt.record)
        self.records.index_attempt(label, attempt_id, key)
        return attempt

    def finish_attempt(
        self, attempt: Attempt, status: AttemptStatus, keep_staging: bool = False, **details: Any
    ) -> None:
        """Record the outcome and log of an attempt, and drop its staging directory (unless
        `keep_staging`: a run aside whose outputs differ is kept for inspection)."""
        attempt.record.update(status=status.value, **details)
        self.records.put_log(attempt.key, attempt.attempt_id, attempt.staging.log)
        self.records.write_attempt(attempt.record)
        if not keep_staging:
            shutil.rmtree(attempt.staging.root, ignore_errors=True)

    def publish(
        self, attempt: Attempt, recipe: dict[str, Any], provenance: dict[str, Any], outputs: Uploaded | Manifest
    ) -> Outputs:
        """Publish an attempt's outputs under its key; the first entry of a key wins.

        `outputs`: already uploaded under the key (`Uploaded`: by a worker on another
        machine, see `upload`), or hashed in the attempt's staging (`Manifest`), from where
        they are moved or uploaded here."""
        existing = self.lookup(attempt.key)
        if existing.outputs is not None:
            return existing.outputs
        if existing.problem is not None:
            self.quarantine(attempt.key, attempt.attempt_id)
        if isinstance(outputs, Manifest):
            outputs = self.upload(attempt.key, attempt.staging.out, outputs)
        return self._commit(attempt, outputs, recipe, provenance)

    def upload(self, key: str, directory: Path, manifest: Manifest) -> Uploaded:
        """Move or upload a finished step's output directory, hashed into `manifest`, under
        `key`: the first half of publishing, which a worker on another machine can do itself."""
        return Uploaded(manifest, self.store.put_dir(directory, layout.output(key), manifest))

    def _commit(
        self, attempt: Attempt, uploaded: Uploaded, recipe: dict[str, Any], provenance: dict[str, Any]
    ) -> Outputs:
        manifest = uploaded.manifest
        root = self.output_dir(attempt.key)
        entry = CacheEntry(
            attempt.key,
            attempt.label,
            manifest,
            recipe,
            provenance,
            attempt.attempt_id,
            manifest.tree_digest,
            uploaded.checksums,
        )
        if not self.create_entry(attempt.key, canonical_json(entry.to_json()).encode(), manifest.tree_digest):
            winner = self.lookup(attempt.key).outputs
            if winner is not None:
                return winner
        elif not self.store.lists_signatures:
            # Where a `stat` is cheap, the entry just written is remembered as read: the first
            # no-op after a cold build then reads and verifies no entry (at 100,000 targets,
            # 100,000 reads, parses and recipe hashes: docs/benchmarks.md, "Graphs of 100,000 targets").
            path = layout.entry(attempt.key)
            if (signature := self.store.signature(path)) is not None:
                self._remember(path, signature, entry)
        return Outputs(attempt.key, manifest.tree_digest, manifest, root, provenance.get("rule_code"))

    def create_entry(self, key: str, data: bytes, tree_digest: str) -> bool:
        """Create `key`'s entry, holding `data`, create-only (False: one was there); its tree
        digest goes beside it for listings to show (`listed_tree`)."""
        return self.store.create_only(layout.entry(key), data, {TREE_HINT: tree_digest})

    def put_blob(self, attempt: Attempt, path: Path, digest: str) -> None:
        """Keep a source file a step reads, by content, so that the recipe can be rerun from
        the store alone (`marinbuild rerun`) once the workspace has changed or is gone."""
        name = layout.blob(digest)
        if self.store.exists(name):
            return
        copy = attempt.staging.root / f"blob-{digest}"
        shutil.copyfile(path, copy)
        self.store.put_file(copy, name)

    def get_blob(self, digest: str, destination: Path) -> bool:
        """Write the blob `digest` to `destination`, verified; False if the store lacks it."""
        data = self.store.read_bytes(layout.blob(digest))
        if data is None or digest_bytes(data) != digest:
            return False
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(data)
        return True

    def quarantine(self, key: str, attempt_id: str) -> None:
        """Move an unusable entry aside (kept for inspection) so the key can be published again."""
        if self._listed is not None:
            self._listed.pop(layout.entry(key), None)
        self._read_ahead.pop(layout.entry(key), None)
        data = self.store.read_bytes(layout.entry(key))
        if data is not None:
            self.store.write_bytes(layout.quarantine(key, attempt_id), data)
            self.store.delete(layout.entry(key))
