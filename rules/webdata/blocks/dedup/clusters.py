"""Deduplication of documents across all shards of a corpus: exact, near and paragraph.

A global step in three phases, each a function here that a rule calls:

1. `map_shard`, once per shard: the shard's *signatures*, written as `.npy` files (a few
   hundred bytes a document): a 128-bit hash of each document's normalised text
   (`normalise`: Unicode NFKC, whitespace runs made one space), its MinHash signature
   (`bands x rows` values of 32 bits over its word n-gram shingles, computed for a
   batch of documents at once with numpy), and, for paragraph dedup, a 64-bit hash of
   each paragraph.
2. `find_clusters`, once, over every shard's signatures in a stable order (the rule sorts
   shards by name; within one, documents keep their order): documents with the same
   content hash are one cluster (exact), and, band by band, documents whose band of
   `rows` values is equal are candidates, kept as near duplicates when their signatures
   agree on at least `threshold` of their values (the estimated Jaccard similarity of
   their shingle sets). The connected components are found by a union-find over
   document positions held in numpy arrays; a component's first document by the stable
   order is kept, and a member is removed only if its content is that document's or its
   signature agrees with that document's on `threshold` of its values: a component
   chains (A like B, B like C, A and C apart), so the members unlike the kept document
   are clustered again among themselves, round after round, until none is left. Each
   band is read from where it lies in each file and sorted once a round, so memory is a
   few arrays of one value per document (81 bytes a document: 1,000,000 documents peak
   at 131 MB of resident memory, docs/benchmarks.md), never all signatures, never a
   Python object per document. With paragraph dedup, the kept documents' paragraphs
   then go through a Bloom filter (`rbloom`) in the same order, and every paragraph seen
   before is marked. It writes one small decision file per shard.
3. `Deduplication.run`, once per shard: the shard's documents less the duplicates and
   the marked paragraphs, and every member of a cluster (kept or removed, with its
   cluster's id, the position of its first member) for the cluster files a researcher
   inspects.

Choices, by measurement on the generated corpus (bench/dedup.py, docs/benchmarks.md):
MinHash is numpy over a batch of documents, not `datasketch` (its per-document Python
loop and SHA-1 per shingle take 4 times the CPU for the same precision and recall); the
seen paragraphs are an `rbloom` Bloom filter (2% of a set's memory); the defaults
(5-word shingles, 25 bands of 4 rows, threshold 0.6) find the generated near duplicates
(2% of words edited: Jaccard 0.66-0.9 on 5-grams) while pages that share a few
paragraphs (up to about 0.4) stay apart.

Every hash here is a pure function of the text and the seed (BLAKE2b for words, paragraphs
and documents; splitmix64 mixing and seeded multiply-shift hashing for shingles), never
Python's salted `hash()` of a string, so the same shard gives the same bytes in any
process, on any machine.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from marinbuild.targets.attrs import JsonValue
from marinbuild.targets.context import StepFailed
from rules.webdata.dedup_config import MAX_HASHES, DedupConfig, FuzzyDedup, ParagraphDedup
from rules.webdata.documents import Document, paragraphs

VERIFY_BYTES = 2**22  # of candidate pairs' signatures compared at once by the reduce
BATCH_WORDS = 2**20  # words hashed in one numpy batch of a shard's map: ~50 MB of arrays
WORD_CACHE = 2**20  # distinct words whose hashes the map remembers before starting afresh
_WORD = re.compile(r"\w+")
_U64 = np.uint64
_PAD = _U64(0x5851F42D4C957F2D)  # the word a document shorter than a shingle is padded with
_SHINGLE_STEP = _U64(0x9E3779B97F4A7C15)

# Decision of find_clusters for each document, in `clusters.npy` files.
UNIQUE, KEPT, EXACT, NEAR = 0, 1, 2, 3
STATUS = {UNIQUE: "unique", KEPT: "kept", EXACT: "exact duplicate", NEAR: "near duplicate"}
KEEPS = (UNIQUE, KEPT)
DECISION = np.dtype([("cluster", "<i8"), ("status", "i1")])

# What map_shard writes into its directory.
CONTENT = "content.npy"  # (documents, 2) uint64: the 128-bit hash of the normalised text
MINHASH = "minhash.npy"  # (bands, documents, rows) uint32: band-major, so a band is one read
PARAGRAPHS = "paragraphs.npy"  # (paragraphs,) uint64, the shard's paragraphs in order
PARAGRAPH_COUNTS = "paragraph_counts.npy"  # (documents,) uint32


# -- hashing ----------------------------------------------------------------------------------


def normalise(text: str) -> str:
    """The text exact dedup compares: Unicode NFKC, whitespace runs one space, stripped, so
    that two extractions of one page laid out apart are one document."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


def _blake(text: str, size: int) -> bytes:
    return hashlib.blake2b(normalise(text).encode(), digest_size=size).digest()


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over an array of uint64 (Steele et al. 2014): every output bit
    depends on every input bit."""
    x = x ^ (x >> _U64(30))
    x *= _U64(0xBF58476D1CE4E5B9)
    x ^= x >> _U64(27)
    x *= _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def _hash_functions(fuzzy: FuzzyDedup) -> tuple[np.ndarray, np.ndarray]:
    """The seeded multiply-shift hash functions h(x) = (a x + b) >> 32 (a odd), derived by
    splitmix64 from the seed (not numpy's generators, whose streams may change)."""
    count = fuzzy.bands * fuzzy.rows
    base = np.arange(2 * count, dtype=_U64) + _U64(fuzzy.seed) * _U64(2 * MAX_HASHES)
    values = _mix(_mix(base + _U64(1)))
    return values[:count] | _U64(1), values[count:]


class _WordHashes:
    """64-bit BLAKE2b hashes of words, remembered for the words of one shard."""

    def __init__(self) -> None:
        self._known: dict[str, int] = {}

    def of(self, words: list[str]) -> np.ndarray:
        known = self._known
        if len(known) > WORD_CACHE:
            known.clear()
        for word in set(words).difference(known):
            known[word] = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        return np.fromiter(map(known.__getitem__, words), dtype=_U64, count=len(words))


def _signatures(words: Sequence[np.ndarray], fuzzy: FuzzyDedup, functions: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The MinHash signatures, (documents, bands x rows) uint32, of documents given as arrays
    of word hashes. A document shorter than a shingle is padded to one, so every document
    has at least one shingle (an empty one the same as every other empty one)."""
    n = fuzzy.ngram
    padded = [w if len(w) >= n else np.concatenate([w, np.full(n - len(w), _PAD)]) for w in words]
    lengths = np.fromiter(map(len, padded), dtype=np.int64, count=len(padded))
    flat = np.concatenate(padded)
    starts = len(flat) - n + 1
    shingles = flat[:starts].copy()
    for k in range(1, n):
        shingles = _mix(shingles * _SHINGLE_STEP ^ flat[k : starts + k])
    counts = lengths - n + 1  # the shingles starting inside each document
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    first_word = np.cumsum(lengths) - lengths
    shingles = shingles[np.repeat(first_word - offsets, counts) + np.arange(counts.sum())]
    a, b = functions
    signatures = np.empty((len(words), len(a)), dtype=np.uint32)
    for j in range(len(a)):
        hashed = shingles * a[j]
        hashed += b[j]
        hashed >>= _U64(32)
        signatures[:, j] = np.minimum.reduceat(hashed, offsets)
    return signatures


# -- phase 1: a shard's signatures ------------------------------------------------------------


@dataclass(frozen=True)
class ShardSignatures:
    """What `map_shard` keeps of one shard's documents, in their order: the arrays of the
    files CONTENT, MINHASH, PARAGRAPHS and PARAGRAPH_COUNTS (the last three None when
    their dedup is off)."""

    content: np.ndarray
    minhash: np.ndarray | None = None
    paragraphs: np.ndarray | None = None
    paragraph_counts: np.ndarray | None = None

    def save(self, directory: Path) -> None:
        """Write the arrays as .npy files into `directory`, in C order (the reduce reads a band
        where it lies): the same arrays, the same bytes."""
        directory.mkdir(parents=True, exist_ok=True)
        for name, array in self._files().items():
            if array is not None:
                np.save(directory / name, np.ascontiguousarray(array), allow_pickle=False)

    def _files(self) -> dict[str, np.ndarray | None]:
        return {
            CONTENT: self.content,
            MINHASH: self.minhash,
            PARAGRAPHS: self.paragraphs,
            PARAGRAPH_COUNTS: self.paragraph_counts,
        }


class _MinHasher:
    """The MinHash signatures of a shard's documents, computed a batch of about BATCH_WORDS
    words at a time, so memory is a batch's arrays and the signatures, whatever the shard."""

    def __init__(self, fuzzy: FuzzyDedup):
        self.fuzzy = fuzzy
        self.functions = _hash_functions(fuzzy)
        self.words = _WordHashes()
        self.done: list[np.ndarray] = []
        self.batch: list[np.ndarray] = []
        self.batch_words = 0

    def add(self, text: str) -> None:
        self.batch.append(self.words.of(_WORD.findall(text.lower())))
        self.batch_words += len(self.batch[-1])
        if self.batch_words >= BATCH_WORDS:
            self._flush()

    def _flush(self) -> None:
        if self.batch:
            self.done.append(_signatures(self.batch, self.fuzzy, self.functions))
        self.batch, self.batch_words = [], 0

    def signatures(self) -> np.ndarray:
        """Every document's signature, band-major: (bands, documents, rows)."""
        self._flush()
        hashes = self.fuzzy.bands * self.fuzzy.rows
        found = np.concatenate(self.done) if self.done else np.empty((0, hashes), np.uint32)
        return found.reshape(len(found), self.fuzzy.bands, self.fuzzy.rows).transpose(1, 0, 2)


def map_shard(documents: Iterable[Document], config: DedupConfig, out: Path) -> int:
    """Write the signatures of one shard's `documents` into the directory `out`; the number
    of documents."""
    content: list[bytes] = []
    paragraph_hashes: list[bytes] = []
    paragraph_counts: list[int] = []
    minhasher = _MinHasher(config.fuzzy) if config.fuzzy else None
    for document in documents:
        content.append(_blake(document.text, 16))
        if config.paragraphs:
            found = paragraphs(document.text)
            paragraph_hashes += [_blake(paragraph, 8) for paragraph in found]
            paragraph_counts.append(len(found))
        if minhasher:
            minhasher.add(document.text)
    ShardSignatures(
        content=np.frombuffer(b"".join(content), dtype="<u8").reshape(len(content), 2),
        minhash=minhasher.signatures() if minhasher else None,
        paragraphs=np.frombuffer(b"".join(paragraph_hashes), dtype="<u8") if config.paragraphs else None,
        paragraph_counts=np.array(paragraph_counts, dtype="<u4") if config.paragraphs else None,
    ).save(out)
    return len(content)


# -- phase 2: clusters over all shards ------------------------------------------------------------


def _roots(parent: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """The representative of each of `nodes`: parent pointers followed to a fixed point."""
    while True:
        up = parent[nodes]
        if np.array_equal(up, nodes):
            return nodes
        nodes = up


def _union(parent: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """Merge the components of each pair (a[i], b[i]): each root hooked under the smallest
    root it meets, until every pair shares a root. A root is always its component's
    smallest position, so the representative is the first document by the stable order."""
    while len(a):
        root_a, root_b = _roots(parent, a), _roots(parent, b)
        apart = root_a != root_b
        a, b, root_a, root_b = a[apart], b[apart], root_a[apart], root_b[apart]
        np.minimum.at(parent, np.maximum(root_a, root_b), np.minimum(root_a, root_b))


def _compress(parent: np.ndarray) -> None:
    """Point every position straight at its root (pointer jumping), in place."""
    while True:
        grand = parent[parent]
        if np.array_equal(grand, parent):
            return
        parent[:] = grand


def _runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (first, other) of positions with equal keys: each position whose key a smaller
    position holds, with the smallest such position."""
    order = np.argsort(keys)
    ordered = keys[order]
    new_run = np.ones(len(keys), dtype=bool)
    new_run[1:] = ordered[1:] != ordered[:-1]
    starts = np.flatnonzero(new_run)
    firsts = np.minimum.reduceat(order, starts)[np.cumsum(new_run) - 1] if len(keys) else order
    others = order != firsts
    return firsts[others], order[others]


class _Signatures:
    """Every shard's MinHash signatures, read a band at a time, or for a few documents."""

    def __init__(self, paths: Sequence[Path], offsets: np.ndarray, fuzzy: FuzzyDedup):
        self.paths = paths
        self.headers = [_npy_header(path) for path in paths]
        self.offsets = offsets  # the position of each shard's first document, and the total
        self.shape = (fuzzy.bands, fuzzy.rows)

    def band(self, band: int) -> np.ndarray:
        """The `rows` values of one band of every document, (documents, rows), read from each
        file where it lies (a memory map would map far more of the files than it reads)."""
        found = np.empty((int(self.offsets[-1]), self.shape[1]), dtype=np.uint32)
        for index, (path, ((_, documents, rows), dtype, start)) in enumerate(zip(self.paths, self.headers)):
            with open(path, "rb") as file:
                file.seek(start + band * documents * rows * dtype.itemsize)
                values = np.fromfile(file, dtype=dtype, count=documents * rows)
            found[self.offsets[index] : self.offsets[index + 1]] = values.reshape(documents, rows)
        return found

    def of(self, documents: np.ndarray) -> np.ndarray:
        """The whole signatures of `documents` (positions), (len(documents), bands, rows)."""
        shard = np.searchsorted(self.offsets, documents, side="right") - 1
        found = np.empty((len(documents), *self.shape), dtype=np.uint32)
        for index in np.unique(shard):
            chosen = shard == index
            shape, dtype, start = self.headers[index]
            minhash = np.memmap(self.paths[index], dtype=dtype, mode="r", offset=start, shape=shape)
            found[chosen] = minhash[:, documents[chosen] - self.offsets[index], :].transpose(1, 0, 2)
        return found


def _npy_header(path: Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """The shape and dtype of the array a .npy file holds, and where its data starts."""
    with open(path, "rb") as file:
        version = np.lib.format.read_magic(file)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(file)
        return shape, dtype, file.tell()


def _band_keys(band: np.ndarray) -> np.ndarray:
    """One 64-bit key per document for the `rows` values of a band."""
    keys = np.zeros(len(band), dtype=_U64)
    for column in range(band.shape[1]):
        keys = _mix(keys * _SHINGLE_STEP ^ band[:, column].astype(_U64))
    return keys


@dataclass(frozen=True)
class ShardDecisions:
    """The files of one shard's decisions: `clusters` a DECISION per document, and, with
    paragraph dedup, `paragraphs` a bool per paragraph, True if it is to be removed."""

    clusters: Path
    paragraphs: Path | None = None


@dataclass
class ClusterCounts:
    """What `find_clusters` found, for `summary.json`."""

    documents: int = 0
    clusters: int = 0  # of two documents or more
    exact_duplicates: int = 0
    near_duplicates: int = 0
    candidate_pairs: int = 0  # that share a band and were not yet in one cluster
    below_threshold: int = 0  # of those, whose signatures agree on too few values
    rounds: int = 0  # of clustering: the members not similar to their cluster's first go again
    unverified: int = 0  # members, over every round, not similar to their cluster's first
    paragraphs: int = 0  # of the kept documents
    duplicate_paragraphs: int = 0

    def to_json(self) -> dict[str, JsonValue]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Clusters:
    """`find_clusters`' result: each shard's decision files, in the shards' order, and the counts."""

    shards: tuple[ShardDecisions, ...]
    counts: ClusterCounts


def find_clusters(maps: Sequence[Path], config: DedupConfig, out: Path) -> Clusters:
    """The clusters of every document of the shards whose `map_shard` directories are `maps`,
    in the stable order; writes each shard's decisions into the new directory `out`."""
    sizes = [_npy_header(directory / CONTENT)[0][0] for directory in maps]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(offsets[-1])
    counts = ClusterCounts(documents=total)
    content = np.empty((total, 2), dtype="<u8")
    for index, directory in enumerate(maps):
        content[offsets[index] : offsets[index + 1]] = np.load(directory / CONTENT)
    signatures = _Signatures([d / MINHASH for d in maps], offsets, config.fuzzy) if config.fuzzy else None
    kept_by = np.arange(total, dtype=np.int64)  # each document's cluster's kept document
    active = np.arange(total, dtype=np.int64)  # the documents not yet decided, in the stable order
    while len(active):
        counts.rounds += 1
        root, verified = _round(active, content, signatures, config, counts)
        kept_by[active[verified]] = active[root[verified]]
        # A cluster's first member is kept; a member not similar to it is decided again, in
        # the next round, among the other such members only.
        active = active[(root != np.arange(len(active))) & ~verified]
        counts.unverified += len(active)
    members = np.bincount(kept_by, minlength=total)
    status = np.full(total, UNIQUE, dtype=np.int8)
    grouped = members[kept_by] > 1
    first = kept_by == np.arange(total)
    status[grouped & first] = KEPT
    removed = grouped & ~first
    same_content = np.all(content == content[kept_by], axis=1)
    status[removed & same_content] = EXACT
    status[removed & ~same_content] = NEAR
    counts.clusters = int(np.count_nonzero(members > 1))
    counts.exact_duplicates = int(np.count_nonzero(status == EXACT))
    counts.near_duplicates = int(np.count_nonzero(status == NEAR))
    out.mkdir(parents=True)
    decisions = []
    for index in range(len(maps)):
        begin, end = offsets[index], offsets[index + 1]
        decision = np.empty(end - begin, dtype=DECISION)
        decision["cluster"] = np.where(grouped[begin:end], kept_by[begin:end], -1)
        decision["status"] = status[begin:end]
        np.save(out / f"{index:05d}.clusters.npy", decision, allow_pickle=False)
        decisions.append(ShardDecisions(out / f"{index:05d}.clusters.npy"))
    if config.paragraphs:
        decisions = _duplicate_paragraphs(maps, decisions, offsets, status <= KEPT, config.paragraphs, out, counts)
    return Clusters(tuple(decisions), counts)


def _round(
    active: np.ndarray,
    content: np.ndarray,
    signatures: _Signatures | None,
    config: DedupConfig,
    counts: ClusterCounts,
) -> tuple[np.ndarray, np.ndarray]:
    """One round of clustering the `active` documents (positions, ascending): each one's root
    (an index into `active`: its component's first member, by a union-find over the exact
    and verified candidate pairs), and whether it is removed, a member other than the root
    whose content is the root's or whose signature agrees with the root's on `threshold` of
    its values. Union-find chains (A like B, B like C: A, B and C one component though A and
    C may differ); checking each member against the root is what keeps C when it does."""
    parent = np.arange(len(active), dtype=np.int64)
    here = content[active]
    if config.exact:
        first, other = _runs(here[:, 0])
        same = np.all(here[first] == here[other], axis=1)  # the other 64 bits too
        _union(parent, first[same], other[same])
    if signatures is not None and config.fuzzy:
        _near_duplicates(parent, active, signatures, config.fuzzy, counts)
    _compress(parent)
    verified = (parent != np.arange(len(active))) & np.all(here == here[parent], axis=1)
    if signatures is not None and config.fuzzy:
        check = np.flatnonzero((parent != np.arange(len(active))) & ~verified)
        verified[check] = _similar(signatures, active[check], active[parent[check]], config.fuzzy)
    return parent, verified


def _similar(signatures: _Signatures, a: np.ndarray, b: np.ndarray, fuzzy: FuzzyDedup) -> np.ndarray:
    """Whether the signatures of each pair (a[i], b[i]) agree on `threshold` of their values,
    read VERIFY_BYTES of signatures at a time."""
    chunk = max(1, VERIFY_BYTES // (2 * 4 * fuzzy.bands * fuzzy.rows))
    similar = np.zeros(len(a), dtype=bool)
    for at in range(0, len(a), chunk):
        pairs = slice(at, at + chunk)
        agreement = np.mean(signatures.of(a[pairs]) == signatures.of(b[pairs]), axis=(1, 2))
        similar[pairs] = agreement >= fuzzy.threshold
    return similar


def _near_duplicates(
    parent: np.ndarray, active: np.ndarray, signatures: _Signatures, fuzzy: FuzzyDedup, counts: ClusterCounts
) -> None:
    """Union every pair of `active` documents that shares a band and whose signatures agree on
    `threshold` of their values, one band at a time: memory is a band's values and keys,
    never the signatures."""
    for band in range(fuzzy.bands):
        first, other = _runs(_band_keys(signatures.band(band)[active]))
        apart = _roots(parent, first) != _roots(parent, other)
        first, other = first[apart], other[apart]
        counts.candidate_pairs += len(first)
        similar = _similar(signatures, active[first], active[other], fuzzy)
        counts.below_threshold += int(np.count_nonzero(~similar))
        _union(parent, first[similar], other[similar])


def _duplicate_paragraphs(
    maps: Sequence[Path],
    decisions: list[ShardDecisions],
    offsets: np.ndarray,
    kept: np.ndarray,
    paragraph_dedup: ParagraphDedup,
    out: Path,
    counts: ClusterCounts,
) -> list[ShardDecisions]:
    """Mark each paragraph of a kept document seen before, by the stable order, through a
    Bloom filter: a shard at a time, its repeats found by a sort, its first occurrences
    looked up in the filter and then added to it."""
    from rbloom import Bloom

    per_shard = [(np.load(d / PARAGRAPH_COUNTS), kept[offsets[i] : offsets[i + 1]]) for i, d in enumerate(maps)]
    counts.paragraphs = sum(int(per_document[kept_here].sum()) for per_document, kept_here in per_shard)
    seen = Bloom(max(counts.paragraphs, 1), paragraph_dedup.false_positive_rate)
    marked = []
    for index, (directory, (per_document, kept_here)) in enumerate(zip(maps, per_shard)):
        hashes = np.load(directory / PARAGRAPHS)
        considered = np.repeat(kept_here, per_document)
        duplicate = np.zeros(len(hashes), dtype=bool)
        candidates = np.flatnonzero(considered)
        values = hashes[candidates].view(np.int64)  # a Python int's hash() is itself: no salt
        _, first = np.unique(values, return_index=True)
        repeat = np.ones(len(values), dtype=bool)
        repeat[first] = False
        firsts = values[np.sort(first)].tolist()
        known = np.fromiter((value in seen for value in firsts), dtype=bool, count=len(firsts))
        seen.update(firsts)
        repeat[np.sort(first)] = known
        duplicate[candidates] = repeat
        counts.duplicate_paragraphs += int(np.count_nonzero(duplicate))
        path = out / f"{index:05d}.paragraphs.npy"
        np.save(path, duplicate, allow_pickle=False)
        marked.append(replace(decisions[index], paragraphs=path))
    return marked


# -- phase 3: a shard deduplicated ----------------------------------------------------------------


@dataclass(frozen=True)
class ClusterMember:
    """A document of a cluster of two or more, as `find_clusters` decided: the first member,
    kept, or a duplicate removed. `cluster` is the first member's position in the stable
    order, the same in every shard's cluster file."""

    document: Document
    cluster: int
    status: str

    def to_json(self) -> dict[str, object]:
        return {"cluster": self.cluster, "status": self.status, **self.document.to_json()}


@dataclass
class Deduplication:
    """One shard's documents less what `find_clusters` removed, and its counts. A kept
    document that paragraph dedup leaves without a paragraph is dropped too (`emptied`),
    though its cluster file names it kept: all of its text is in earlier documents."""

    decisions: ShardDecisions
    documents: int = 0
    kept: int = 0
    removed: dict[str, int] = field(default_factory=lambda: {STATUS[EXACT]: 0, STATUS[NEAR]: 0})
    paragraphs_removed: int = 0
    emptied: int = 0  # kept documents every paragraph of which was a repeat

    def run(self, documents: Iterable[Document]) -> Iterator[Document | ClusterMember]:
        """Each document kept (its repeated paragraphs removed), and each cluster member (a
        kept one is yielded as both), in the shard's order."""
        decisions = np.load(self.decisions.clusters)
        marks = np.load(self.decisions.paragraphs) if self.decisions.paragraphs else None
        at = 0
        for position, document in enumerate(documents):
            if position >= len(decisions):
                raise StepFailed(f"the shard has more documents than its decisions ({len(decisions)})")
            self.documents += 1
            cluster, status = int(decisions["cluster"][position]), int(decisions["status"][position])
            if cluster >= 0:
                yield ClusterMember(document, cluster, STATUS[status])
            if marks is not None:
                found = paragraphs(document.text)
                repeated, at = marks[at : at + len(found)], at + len(found)
                if status in KEEPS and repeated.any():
                    self.paragraphs_removed += int(repeated.sum())
                    left = [paragraph for paragraph, drop in zip(found, repeated) if not drop]
                    if not left:
                        self.emptied += 1
                        continue
                    document = replace(document, text="\n\n".join(left))
            if status in KEEPS:
                self.kept += 1
                yield document
            else:
                self.removed[STATUS[status]] += 1
        if self.documents != len(decisions) or (marks is not None and at != len(marks)):
            raise StepFailed(f"the shard's {self.documents} documents are not those its decisions were made for")

    def to_json(self) -> Mapping[str, JsonValue]:
        return {
            "documents": self.documents,
            "kept": self.kept,
            "removed": dict(self.removed),
            "paragraphs_removed": self.paragraphs_removed,
            "emptied": self.emptied,
        }
