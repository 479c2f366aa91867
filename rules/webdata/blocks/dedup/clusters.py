"""Phase 2 of dedup, once over every shard's signatures in the stable order (the inputs in
their order, then the splits, then the shards by name; within one, documents keep their
order), writing one small decision file per shard.

Documents with the same content hash are one cluster (exact), and, band by band,
documents whose band of `rows` values is equal are candidates, kept as near duplicates
when their signatures agree on at least `threshold` of their values (the estimated
Jaccard similarity of their shingle sets). The connected components are found by a
union-find over document positions held in numpy arrays; a component's first document is
kept, and a member is removed only if its content is that document's or its signature
agrees with that document's on `threshold` of its values: a component chains (A like B,
B like C, A and C apart), so the members unlike the kept document are clustered again
among themselves, round after round. Each band is read from where it lies in each file,
so memory is a few arrays of one value per document (1,000,000 documents peak at 131 MB,
docs/benchmarks.md), never all signatures. With paragraph dedup, the kept documents'
paragraphs then go through a Bloom filter in the same order, and every paragraph seen
before is marked."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from marinbuild.targets.attrs import JsonValue
from rules.webdata.blocks.dedup.config import DedupConfig, FuzzyDedup, ParagraphDedup
from rules.webdata.blocks.dedup.signatures import (
    CONTENT,
    MINHASH,
    PARAGRAPH_COUNTS,
    PARAGRAPHS,
    SHINGLE_STEP,
    U64,
    mix,
)

VERIFY_BYTES = 2**22  # of candidate pairs' signatures compared at once by the reduce

# Decision of find_clusters for each document, in `clusters.npy` files.
UNIQUE, KEPT, EXACT, NEAR = 0, 1, 2, 3
STATUS = {UNIQUE: "unique", KEPT: "kept", EXACT: "exact duplicate", NEAR: "near duplicate"}
KEEPS = (UNIQUE, KEPT)
DECISION = np.dtype([("cluster", "<i8"), ("status", "i1")])


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


class Signatures:
    """Every shard's MinHash signatures, read a band at a time, or for a few documents."""

    def __init__(self, paths: Sequence[Path], offsets: np.ndarray, fuzzy: FuzzyDedup):
        self.paths = paths
        self.headers = [npy_header(path) for path in paths]
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


def npy_header(path: Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """The shape and dtype of the array a .npy file holds, and where its data starts."""
    with open(path, "rb") as file:
        version = np.lib.format.read_magic(file)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(file)
        return shape, dtype, file.tell()


def band_keys(band: np.ndarray) -> np.ndarray:
    """One 64-bit key per document for the `rows` values of a band."""
    keys = np.zeros(len(band), dtype=U64)
    for column in range(band.shape[1]):
        keys = mix(keys * SHINGLE_STEP ^ band[:, column].astype(U64))
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
    candidate_pairs: int = 0  # (first of a band key, other) pairs, once for each band they share
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
    sizes = [npy_header(directory / CONTENT)[0][0] for directory in maps]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(offsets[-1])
    counts = ClusterCounts(documents=total)
    content = np.empty((total, 2), dtype="<u8")
    for index, directory in enumerate(maps):
        content[offsets[index] : offsets[index + 1]] = np.load(directory / CONTENT)
    signatures = Signatures([d / MINHASH for d in maps], offsets, config.fuzzy) if config.fuzzy else None
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
        decisions = duplicate_paragraphs(maps, decisions, config.paragraphs, out, counts)
    return Clusters(tuple(decisions), counts)


def _round(
    active: np.ndarray,
    content: np.ndarray,
    signatures: Signatures | None,
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


def _similar(signatures: Signatures, a: np.ndarray, b: np.ndarray, fuzzy: FuzzyDedup) -> np.ndarray:
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
    parent: np.ndarray, active: np.ndarray, signatures: Signatures, fuzzy: FuzzyDedup, counts: ClusterCounts
) -> None:
    """Union every pair of `active` documents that shares a band and whose signatures agree on
    `threshold` of their values, one band at a time: memory is a band's values and keys,
    never the signatures."""
    for band in range(fuzzy.bands):
        first, other = _runs(band_keys(signatures.band(band)[active]))
        counts.candidate_pairs += len(first)
        apart = _roots(parent, first) != _roots(parent, other)  # pairs already joined need no check
        first, other = first[apart], other[apart]
        similar = _similar(signatures, active[first], active[other], fuzzy)
        _union(parent, first[similar], other[similar])


def duplicate_paragraphs(
    maps: Sequence[Path],
    decisions: list[ShardDecisions],
    paragraph_dedup: ParagraphDedup,
    out: Path,
    counts: ClusterCounts,
) -> list[ShardDecisions]:
    """Mark each paragraph of a kept document (by each shard's decisions) seen before, by
    the stable order, through a Bloom filter: a shard at a time, its repeats found by a
    sort, its first occurrences looked up in the filter and then added to it."""
    from rbloom import Bloom

    per_shard = [
        (np.load(d / PARAGRAPH_COUNTS), np.load(decision.clusters)["status"] <= KEPT)
        for d, decision in zip(maps, decisions)
    ]
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
