"""Phase 2 of dedup in units of bounded size, for a corpus more than one process should hold
(`dedup`'s `reduce_documents`): the same decisions as `find_clusters` (clusters.py), as a
chain of waves of units, each reading files the wave before wrote and writing files
partitioned for the next, so that no process holds more than about `unit_documents`
documents' worth of records, whatever the corpus. The step runs each wave through
`ctx.map_shards`: on the local pool, or as Ray tasks with `--executor ray`; every unit is
an entry of its own, so a build killed mid-way keeps the units it finished.

A round of clustering, over the documents still undecided (all of them in the first):

1. `bucket`, a unit per shard: each document's exact content hash and its band keys, sent
   to key partitions by hash range (a band's equal keys meet in one partition);
2. `pairs`, a unit per key partition: documents with equal keys, each paired with the
   first of them (by the stable order), as `_runs` does: exact pairs of equal content are
   edges at once; band pairs are candidates, partitioned by their first document's range;
3. `attach` and `verify`, a unit per document range each: a join that brings each pair's
   first document's content and signature to its other document's range, where the two
   are compared; candidates whose signatures agree on `threshold` of their values are
   edges, partitioned by each end's range;
4. connected components by alternating large-star and small-star steps (Kiveris et al.,
   "Connected Components in MapReduce and Beyond", SoCC 2014), a unit per document range
   each, until neither changes an edge: each component is then a star around its first
   document, its root;
5. `attach` and `verify` again, over (root, member) pairs: a member whose content is its
   root's or whose signature agrees with its root's on `threshold` is removed; the others
   are the next round's documents, as in `find_clusters`.

Then `decide`, a unit per shard, writes its decision file from the removals and roots of
every round. The paragraph pass (a Bloom filter over the kept documents in the stable
order) stays in the driver, as it is one sequence by definition.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from marinbuild.targets.attrs import JsonValue
from marinbuild.targets.shards import ShardResult, ShardUnit
from rules.webdata.blocks.dedup.clusters import (
    DECISION,
    EXACT,
    KEPT,
    NEAR,
    UNIQUE,
    ClusterCounts,
    Clusters,
    ShardDecisions,
    Signatures,
    band_keys,
    duplicate_paragraphs,
    npy_header,
)
from rules.webdata.blocks.dedup.config import DedupConfig, FuzzyDedup
from rules.webdata.blocks.dedup.signatures import CONTENT, MINHASH

BAND = np.dtype([("band", "<u2"), ("key", "<u8"), ("pos", "<i8")])
EXACT_KEY = np.dtype([("c0", "<u8"), ("c1", "<u8"), ("pos", "<i8")])
PAIR = np.dtype([("a", "<i8"), ("b", "<i8")])
REMOVED = np.dtype([("member", "<i8"), ("root", "<i8"), ("same", "?")])
COUNTS = "counts.json"  # what a unit counted, for the summary and the driver's loop
BAND_RECORDS_PER_DOCUMENT = 8  # a key partition holds about 8 x unit_documents band records (17 bytes each)

# A wave's unit function reads its files by role and its parameters, and writes into `out`.
Wave = Callable[[Mapping[str, Path], Mapping[str, JsonValue], Path], None]
# How the driver runs a wave: its units, by the wave's name, to their results in order.
RunWave = Callable[[str, Sequence[ShardUnit]], list[ShardResult]]


# -- partitions -------------------------------------------------------------------------------


def _key_partition(keys: np.ndarray, partitions: int) -> np.ndarray:
    """Which of `partitions` hash ranges each 64-bit key falls in (its top 32 bits, scaled)."""
    return ((keys >> np.uint64(32)) * np.uint64(partitions) >> np.uint64(32)).astype(np.int64)


def _write_parts(out: Path, prefix: str, records: np.ndarray, part: np.ndarray, parts: int) -> None:
    """`records` split by `part` into `prefix-00000.npy`... one file per partition, in order
    within each (a stable sort), empty ones too, so a reader names them without listing."""
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(parts + 1))
    for index in range(parts):
        np.save(out / f"{prefix}-{index:05d}.npy", records[order[bounds[index] : bounds[index + 1]]])


def _load_all(files: Mapping[str, Path], role: str, dtype: np.dtype) -> np.ndarray:
    """Every file whose role is `role/...`, concatenated, in the roles' order."""
    found = [np.load(path) for name, path in sorted(files.items()) if name.startswith(role + "/")]
    return np.concatenate(found) if found else np.empty(0, dtype=dtype)


def _both_ways(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Undirected edges as PAIR records in both directions (a node's edges, grouped by `a`)."""
    edges = np.empty(2 * len(a), dtype=PAIR)
    edges["a"], edges["b"] = np.concatenate([a, b]), np.concatenate([b, a])
    return edges


def _counts(out: Path, **counts: int | bool) -> None:
    (out / COUNTS).write_text(json.dumps(counts, sort_keys=True))


class _Documents:
    """The content hashes and signatures of the documents of a few consecutive shards,
    looked up by position: the shards a unit's document range overlaps."""

    def __init__(self, files: Mapping[str, Path], shards: Sequence[Sequence[int]], fuzzy: FuzzyDedup | None):
        starts = [start for start, _ in shards]
        self.offsets = np.array([*starts, shards[-1][0] + shards[-1][1]] if shards else [0], dtype=np.int64)
        self.content = _load_all(files, "content", np.dtype(("<u8", 2))).reshape(-1, 2)
        paths = [path for name, path in sorted(files.items()) if name.startswith("minhash/")]
        self.signatures = Signatures(paths, self.offsets, fuzzy) if fuzzy else None

    def content_of(self, positions: np.ndarray) -> np.ndarray:
        return self.content[positions - self.offsets[0]]


# -- the waves --------------------------------------------------------------------------------


def bucket(files: Mapping[str, Path], attrs: Mapping[str, JsonValue], out: Path) -> None:
    """One shard's undecided documents: exact keys and band keys, by key partition."""
    start, parts = int(attrs["start"]), int(attrs["partitions"])
    content = np.load(files["content"])
    chosen = np.arange(len(content), dtype=np.int64)
    if attrs["round"] > 1:
        undecided = _load_all(files, "undecided", np.dtype("<i8"))
        chosen = np.sort(undecided[(undecided >= start) & (undecided < start + len(content))]) - start
    exact = np.empty(len(chosen) if attrs["exact"] else 0, dtype=EXACT_KEY)
    if attrs["exact"]:
        exact["c0"], exact["c1"], exact["pos"] = content[chosen, 0], content[chosen, 1], start + chosen
    _write_parts(out, "exact", exact, _key_partition(exact["c0"], parts), parts)
    fuzzy = FuzzyDedup.from_spec(attrs["fuzzy"]) if attrs["fuzzy"] else None
    bands = np.empty(len(chosen) * (fuzzy.bands if fuzzy else 0), dtype=BAND)
    if fuzzy:
        signatures = Signatures([files["minhash"]], np.array([0, len(content)]), fuzzy)
        for band in range(fuzzy.bands):
            part = bands[band * len(chosen) : (band + 1) * len(chosen)]
            part["band"], part["key"], part["pos"] = band, band_keys(signatures.band(band)[chosen]), start + chosen
    _write_parts(out, "bands", bands, _key_partition(bands["key"], parts), parts)


def pairs(files: Mapping[str, Path], attrs: Mapping[str, JsonValue], out: Path) -> None:
    """One key partition: each document paired with the first document of its key, by
    content (an edge when all 128 bits agree) and by band (a candidate, to verify)."""
    size, ranges = int(attrs["unit_documents"]), int(attrs["ranges"])
    exact = _load_all(files, "exact", EXACT_KEY)
    exact = exact[np.lexsort((exact["pos"], exact["c0"]))]
    first = _firsts(exact["c0"])
    same = (exact["c1"] == exact["c1"][first]) & (first != np.arange(len(exact)))
    edges = _both_ways(exact["pos"][first[same]], exact["pos"][same])
    _write_parts(out, "edges", edges, edges["a"] // size, ranges)
    bands = _load_all(files, "bands", BAND)
    bands = bands[np.lexsort((bands["pos"], bands["key"], bands["band"]))]
    first = _firsts(bands["key"], bands["band"])
    other = first != np.arange(len(bands))
    candidates = np.unique(_pairs(bands["pos"][first[other]], bands["pos"][other]))
    _write_parts(out, "candidates", candidates, candidates["a"] // size, ranges)
    _counts(out, candidate_pairs=int(np.count_nonzero(other)), edges=int(np.count_nonzero(same)))


def _firsts(keys: np.ndarray, group: np.ndarray | None = None) -> np.ndarray:
    """For records sorted by (group, key, position): the index of the first record of each
    record's run of equal (group, key)."""
    new_run = np.ones(len(keys), dtype=bool)
    new_run[1:] = keys[1:] != keys[:-1]
    if group is not None:
        new_run[1:] |= group[1:] != group[:-1]
    starts = np.flatnonzero(new_run)
    return starts[np.cumsum(new_run) - 1]


def _pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    found = np.empty(len(a), dtype=PAIR)
    found["a"], found["b"] = a, b
    return found


def _attached(fuzzy: FuzzyDedup | None) -> np.dtype:
    """A pair with its first document's content hash (and signature, with fuzzy dedup)."""
    fields = [("a", "<i8"), ("b", "<i8"), ("content", "<u8", (2,))]
    if fuzzy:
        fields.append(("signature", "<u4", (fuzzy.bands, fuzzy.rows)))
    return np.dtype(fields)


def attach(files: Mapping[str, Path], attrs: Mapping[str, JsonValue], out: Path) -> None:
    """One document range: each pair whose first document lies in it, with that document's
    content hash and signature, sent to the range of its other document."""
    fuzzy = FuzzyDedup.from_spec(attrs["fuzzy"]) if attrs["fuzzy"] else None
    documents = _Documents(files, attrs["shards"], fuzzy)
    found = np.unique(_load_all(files, "pairs", PAIR))
    attached = np.empty(len(found), dtype=_attached(fuzzy))
    attached["a"], attached["b"] = found["a"], found["b"]
    attached["content"] = documents.content_of(found["a"])
    if documents.signatures is not None:
        attached["signature"] = documents.signatures.of(found["a"])
    _write_parts(out, "attached", attached, found["b"] // int(attrs["unit_documents"]), int(attrs["ranges"]))


def verify(files: Mapping[str, Path], attrs: Mapping[str, JsonValue], out: Path) -> None:
    """One document range: each attached pair whose other document lies in it, compared.
    Candidates that agree become edges; a (root, member) pair that agrees removes the
    member, and one that does not leaves the member for the next round."""
    fuzzy = FuzzyDedup.from_spec(attrs["fuzzy"]) if attrs["fuzzy"] else None
    size, ranges = int(attrs["unit_documents"]), int(attrs["ranges"])
    documents = _Documents(files, attrs["shards"], fuzzy)
    attached = _load_all(files, "attached", _attached(fuzzy))
    same = np.all(documents.content_of(attached["b"]) == attached["content"], axis=1)
    similar = np.zeros(len(attached), dtype=bool)
    if fuzzy and documents.signatures is not None:
        agreement = np.mean(documents.signatures.of(attached["b"]) == attached["signature"], axis=(1, 2))
        similar = agreement >= fuzzy.threshold
    if attrs["mode"] == "candidates":
        edges = _both_ways(attached["a"][similar], attached["b"][similar])
        _write_parts(out, "edges", edges, edges["a"] // size, ranges)
        _counts(out, edges=int(np.count_nonzero(similar)))
        return
    verified = same | similar
    removed = np.empty(int(np.count_nonzero(verified)), dtype=REMOVED)
    removed["member"], removed["root"], removed["same"] = (
        attached["b"][verified],
        attached["a"][verified],
        same[verified],
    )
    np.save(out / "removed.npy", removed)
    roots = np.unique(removed["root"])
    _write_parts(out, "roots", roots, roots // size, ranges)
    undecided = np.sort(attached["b"][~verified])
    np.save(out / "undecided.npy", undecided)
    _counts(out, unverified=len(undecided))


def large_star(files: Mapping[str, Path], attrs: Mapping[str, JsonValue], out: Path) -> None:
    """Each node of a document range joins its larger neighbours to the smallest node it
    sees (itself included)."""
    edges, nodes, starts = _grouped(files)
    smallest = np.minimum(nodes, np.minimum.reduceat(edges["b"], starts)) if len(edges) else nodes
    mine = smallest[np.repeat(np.arange(len(nodes)), np.diff(np.append(starts, len(edges))))]
    larger = edges["b"] > edges["a"]
    changed = bool(np.any(larger & (mine < edges["a"])))
    _send(out, attrs, edges["b"][larger], mine[larger], changed)


def small_star(files: Mapping[str, Path], attrs: Mapping[str, JsonValue], out: Path) -> None:
    """Each node of a document range joins itself and its smaller neighbours to the smallest
    of them. Where a node has exactly one smaller neighbour, that is its root once no step
    changes an edge: those (root, member) pairs are written for the round's last step."""
    edges, _, _ = _grouped(files)
    edges = edges[edges["b"] < edges["a"]]
    nodes, starts, sizes = np.unique(edges["a"], return_index=True, return_counts=True)
    smallest = np.minimum.reduceat(edges["b"], starts) if len(edges) else nodes
    mine = np.repeat(smallest, sizes)
    others = edges["b"] != mine
    members = _pairs(smallest[sizes == 1], nodes[sizes == 1])
    size, ranges = int(attrs["unit_documents"]), int(attrs["ranges"])
    _write_parts(out, "members", members, members["a"] // size, ranges)
    ends = np.concatenate([edges["b"][others], nodes])
    _send(out, attrs, ends, np.concatenate([mine[others], smallest]), bool(np.any(sizes > 1)))


def _grouped(files: Mapping[str, Path]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The edges of this range's nodes (a PAIR per direction), without repeats or loops,
    grouped by node: the edges, the nodes, and where each node's edges start."""
    edges = np.unique(_load_all(files, "edges", PAIR))
    edges = edges[edges["a"] != edges["b"]]
    nodes, starts = np.unique(edges["a"], return_index=True)
    return edges, nodes, starts


def _send(out: Path, attrs: Mapping[str, JsonValue], a: np.ndarray, b: np.ndarray, changed: bool) -> None:
    edges = _both_ways(a, b)
    _write_parts(out, "edges", edges, edges["a"] // int(attrs["unit_documents"]), int(attrs["ranges"]))
    _counts(out, changed=changed, edges=len(a))


def decide(files: Mapping[str, Path], attrs: Mapping[str, JsonValue], out: Path) -> None:
    """One shard's decisions, from every round's removals and roots in its range."""
    start, count = int(attrs["start"]), int(attrs["documents"])
    decision = np.empty(count, dtype=DECISION)
    decision["cluster"], decision["status"] = -1, UNIQUE
    removed = _load_all(files, "removed", REMOVED)
    removed = removed[(removed["member"] >= start) & (removed["member"] < start + count)]
    decision["cluster"][removed["member"] - start] = removed["root"]
    decision["status"][removed["member"] - start] = np.where(removed["same"], EXACT, NEAR)
    roots = _load_all(files, "roots", np.dtype("<i8"))
    roots = np.unique(roots[(roots >= start) & (roots < start + count)])
    decision["cluster"][roots - start], decision["status"][roots - start] = roots, KEPT
    np.save(out / "clusters.npy", decision, allow_pickle=False)
    statuses = np.bincount(decision["status"], minlength=4)
    _counts(out, clusters=int(statuses[KEPT]), exact=int(statuses[EXACT]), near=int(statuses[NEAR]))


WAVES: dict[str, Wave] = {
    "bucket": bucket,
    "pairs": pairs,
    "attach": attach,
    "verify": verify,
    "large_star": large_star,
    "small_star": small_star,
    "decide": decide,
}


# -- the driver -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Shard:
    map_dir: Path  # its map unit's output: CONTENT, MINHASH...
    start: int  # the position of its first document in the stable order
    documents: int


class PartitionedReduce:
    """The driver of the waves: which units each wave has and what each reads. It holds
    the shards' list and the units' results (paths), never a record per document."""

    def __init__(self, maps: Sequence[Path], config: DedupConfig, unit_documents: int, run_wave: RunWave):
        sizes = [npy_header(directory / CONTENT)[0][0] for directory in maps]
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.shards = [_Shard(directory, int(starts[i]), sizes[i]) for i, directory in enumerate(maps)]
        self.documents = int(starts[-1])
        self._starts = [int(start) for start in starts[:-1]]
        self.config = config
        self.size = unit_documents
        self.ranges = max(1, math.ceil(self.documents / unit_documents))
        bands = config.fuzzy.bands if config.fuzzy else 0
        self.partitions = max(1, math.ceil(self.documents * (bands + 1) / (BAND_RECORDS_PER_DOCUMENT * unit_documents)))
        self.run_wave = run_wave
        self.counts = ClusterCounts(documents=self.documents)
        self._params: dict[str, JsonValue] = {
            "fuzzy": config.fuzzy.to_json() if config.fuzzy else False,
            "exact": config.exact,
            "unit_documents": unit_documents,
            "ranges": self.ranges,
        }

    def run(self, out: Path) -> Clusters:
        """Every round, then each shard's decisions; paragraph marks go into the new `out`."""
        removals: list[list[ShardResult]] = []  # each round's verify units, by document range
        undecided: list[ShardResult] | None = None
        unverified: list[int] = []  # of each document range, the documents left undecided
        while self.documents:
            self.counts.rounds += 1
            members = self._components(self._edges(undecided, unverified))
            if not members:
                break
            undecided = self._compare(members, "members", "members")
            removals.append(undecided)
            unverified = [int(result.read_json(COUNTS)["unverified"]) for result in undecided]
            self.counts.unverified += sum(unverified)
            if not any(unverified):
                break
        decided = self._wave(
            "decide",
            [
                (
                    f"decide {index:05d}",
                    self._decisions_of(shard, removals),
                    {"start": shard.start, "documents": shard.documents},
                )
                for index, shard in enumerate(self.shards)
            ],
        )
        self.counts.clusters = self._sum(decided, "clusters")
        self.counts.exact_duplicates = self._sum(decided, "exact")
        self.counts.near_duplicates = self._sum(decided, "near")
        out.mkdir(parents=True)
        decisions = [ShardDecisions(result.path("clusters.npy")) for result in decided]
        if self.config.paragraphs:
            maps = [shard.map_dir for shard in self.shards]
            decisions = duplicate_paragraphs(maps, decisions, self.config.paragraphs, out, self.counts)
        return Clusters(tuple(decisions), self.counts)

    # -- one round --------------------------------------------------------------------------

    def _edges(self, undecided: list[ShardResult] | None, unverified: list[int]) -> list[ShardResult]:
        """The round's edges, by range: exact pairs, and verified candidates. After the
        first round, over the `undecided` documents only (`unverified` of them by range)."""
        round_ = self.counts.rounds
        units = []
        for index, shard in enumerate(self.shards):
            files = {"content": shard.map_dir / CONTENT}
            if self.config.fuzzy:
                files["minhash"] = shard.map_dir / MINHASH
            if undecided is not None:
                parts = [part for part in self._ranges_of(shard) if unverified[part]]
                if not parts:
                    continue
                files.update(
                    {f"undecided/{i:05d}": undecided[part].path("undecided.npy") for i, part in enumerate(parts)}
                )
            attrs = {"start": shard.start, "partitions": self.partitions, "round": round_}
            units.append((f"round {round_} bucket {index:05d}", files, attrs))
        buckets = self._wave("bucket", units)
        found = self._wave(
            "pairs",
            [
                (
                    f"round {round_} pairs {part:05d}",
                    {**self._from(buckets, "exact", part), **self._from(buckets, "bands", part)},
                    {},
                )
                for part in range(self.partitions)
            ],
        )
        self.counts.candidate_pairs += self._sum(found, "candidate_pairs")
        verified = self._compare(found, "candidates", "candidates") if self.config.fuzzy else []
        return found + verified

    def _components(self, edged: list[ShardResult]) -> list[ShardResult]:
        """Connected components of the round's edges: large-star and small-star steps until
        neither changes an edge; then the last step's results, whose `members-*` files hold
        each (root, member) pair. None without an edge."""
        if not self._sum(edged, "edges"):
            return []
        current, step, changed = edged, 0, True
        while changed:
            step += 1
            changed = False
            for wave in ("large_star", "small_star"):
                name = f"round {self.counts.rounds} {wave} {step}"
                current = self._wave(
                    wave, [(f"{name} {j:05d}", self._from(current, "edges", j), {}) for j in range(self.ranges)]
                )
                changed |= any(result.read_json(COUNTS)["changed"] for result in current)
        return current

    def _compare(self, results: list[ShardResult], prefix: str, mode: str) -> list[ShardResult]:
        """The join of attach and verify over the pairs in `results`' `prefix-*` files."""
        name = f"round {self.counts.rounds}"
        attached = self._wave(
            "attach",
            [
                (
                    f"{name} attach {mode} {j:05d}",
                    {**self._from(results, prefix, j, "pairs"), **self._documents(j)},
                    {"shards": self._spans(j)},
                )
                for j in range(self.ranges)
            ],
        )
        return self._wave(
            "verify",
            [
                (
                    f"{name} verify {mode} {j:05d}",
                    {**self._from(attached, "attached", j), **self._documents(j)},
                    {"shards": self._spans(j), "mode": mode},
                )
                for j in range(self.ranges)
            ],
        )

    # -- what a unit reads ------------------------------------------------------------------

    def _wave(self, wave: str, units: list[tuple[str, dict[str, Path], dict[str, JsonValue]]]) -> list[ShardResult]:
        return self.run_wave(
            wave, [ShardUnit(name, files, {"wave": wave, **self._params, **attrs}) for name, files, attrs in units]
        )

    @staticmethod
    def _sum(results: Sequence[ShardResult], count: str) -> int:
        return sum(int(result.read_json(COUNTS).get(count, 0)) for result in results)

    @staticmethod
    def _from(results: Sequence[ShardResult], prefix: str, part: int, role: str | None = None) -> dict[str, Path]:
        """Partition `part` of every result's `prefix-*` files, by role `role/i`."""
        name = f"{prefix}-{part:05d}.npy"
        return {f"{role or prefix}/{i:05d}": r.path(name) for i, r in enumerate(results) if name in r.files}

    def _decisions_of(self, shard: _Shard, removals: list[list[ShardResult]]) -> dict[str, Path]:
        """What `decide` reads for `shard`: every round's removals of the ranges it overlaps,
        and the roots that lie in them."""
        files = {}
        for round_, verified in enumerate(removals):
            for part in self._ranges_of(shard):
                files[f"removed/{round_:03d}/{part:05d}"] = verified[part].path("removed.npy")
                roots = self._from(verified, "roots", part).values()
                files.update({f"roots/{round_:03d}/{part:05d}/{i:05d}": path for i, path in enumerate(roots)})
        return files

    def _overlapping(self, part: int) -> range:
        """The shards (indices) that hold documents of range `part`: a bisection of their starts."""
        begin = bisect.bisect_right(self._starts, part * self.size) - 1
        end = bisect.bisect_left(self._starts, (part + 1) * self.size)
        return range(max(begin, 0), end)

    def _documents(self, part: int) -> dict[str, Path]:
        """The content and signature files of the shards document range `part` overlaps."""
        files = {}
        for i in self._overlapping(part):
            files[f"content/{i:06d}"] = self.shards[i].map_dir / CONTENT
            if self.config.fuzzy:
                files[f"minhash/{i:06d}"] = self.shards[i].map_dir / MINHASH
        return files

    def _spans(self, part: int) -> list[JsonValue]:
        return [[self.shards[i].start, self.shards[i].documents] for i in self._overlapping(part)]

    def _ranges_of(self, shard: _Shard) -> range:
        last = max(shard.start, shard.start + shard.documents - 1) // self.size
        return range(shard.start // self.size, last + 1)
