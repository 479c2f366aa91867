"""Deduplication: exact and near duplicates of a generated web corpus found at the goals'
precision and recall, clusters that account for every document removed, signatures the
same bytes in any process, a reduce that holds one band at a time, and paragraphs seen
before removed.

The corpus is the raw web corpus of `raw_corpus`, extracted by `extract`: its ground truth
says which page copies which. Only its English content pages are deduplicated (originals
and their exact and near copies), as in a pipeline where the filters run first: pages of
lorem ipsum or of one locale's phrases are duplicates of each other too, which the ground
truth does not list.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from marinbuild.targets.attrs import AttrError
from marinbuild.targets.context import StepFailed
from marinbuild.targets.shards import ShardResult, ShardUnit
from rules.webdata.blocks.dedup.apply import ClusterMember, Deduplication
from rules.webdata.blocks.dedup.clusters import KEPT, NEAR, VERIFY_BYTES, ClusterCounts, Clusters, find_clusters
from rules.webdata.blocks.dedup.config import DedupConfig, FuzzyDedup, ParagraphDedup
from rules.webdata.blocks.dedup.partitioned import WAVES, PartitionedReduce
from rules.webdata.blocks.dedup.signatures import CONTENT, MINHASH, ShardSignatures, map_shard
from rules.webdata.blocks.documents import Document, Skips, read_documents, write_documents
from rules.webdata.blocks.extract import read_warc
from rules.webdata.blocks.raw_corpus.pages import RawCorpusSpec
from rules.webdata.blocks.raw_corpus.warc import GROUND_TRUTH, WARC_DIRECTORY, write_raw_corpus

SPEC = RawCorpusSpec(
    seed=7, pages=400, pages_per_file=100, exact_duplicate_rate=0.1, near_duplicate_rate=0.15, stdlib_modules=3
)
CONTENT_KINDS = ("original", "exact_duplicate", "near_duplicate")


@dataclass
class Deduplicated:
    shards: list[Path]
    clusters: Clusters
    kept: list[list[Document]]  # by shard
    members: list[ClusterMember]
    applied: list[Deduplication]


def _dedup(shards: list[Path], config: DedupConfig, work: Path) -> Deduplicated:
    maps = []
    for index, shard in enumerate(shards):
        maps.append(work / "maps" / f"{index:05d}")
        map_shard(read_documents(shard, Skips()), config, maps[-1])
    clusters = find_clusters(maps, config, work / "clusters")
    kept, members, applied = [], [], []
    for shard, decisions in zip(shards, clusters.shards):
        deduplication = Deduplication(decisions)
        out = list(deduplication.run(read_documents(shard, Skips())))
        kept.append([item for item in out if isinstance(item, Document)])
        members += [item for item in out if isinstance(item, ClusterMember)]
        applied.append(deduplication)
    return Deduplicated(shards, clusters, kept, members, applied)


def _write_shards(directory: Path, shards: list[list[str]]) -> list[Path]:
    """Shards of documents with these texts, ids `S:N`, in `directory`."""
    paths = []
    for index, texts in enumerate(shards):
        documents = [Document(text, f"{index}:{number}") for number, text in enumerate(texts)]
        write_documents(directory / f"{index}", documents)
        paths.append(directory / f"{index}" / "shard-00000.jsonl")
    return paths


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[list[Path], dict[str, dict]]:
    """The corpus's English content pages as documents in several shards, and its ground truth by URL."""
    root = tmp_path_factory.mktemp("corpus")
    write_raw_corpus(SPEC, root / "raw")
    truth = {
        record["url"]: record for record in map(json.loads, (root / "raw" / GROUND_TRUTH).read_text().splitlines())
    }
    documents = [
        document
        for warc in sorted((root / "raw" / WARC_DIRECTORY).iterdir())
        for document in read_warc(warc, Skips())
        if truth[document.url]["kind"] in CONTENT_KINDS
    ]
    write_documents(root / "docs", documents, shard_bytes=150_000)
    return sorted((root / "docs").glob("shard-*.jsonl")), truth


@pytest.fixture(scope="module")
def deduplicated(corpus, tmp_path_factory) -> Deduplicated:
    return _dedup(corpus[0], DedupConfig(), tmp_path_factory.mktemp("dedup"))


def _original(url: str, truth: dict[str, dict]) -> str:
    return truth[url]["copy_of"] or url


def test_the_corpus_spans_shards_and_holds_copies_of_each_kind(corpus) -> None:
    shards, truth = corpus
    kinds = [truth[d.url]["kind"] for shard in shards for d in read_documents(shard, Skips())]
    assert len(shards) >= 3 and kinds.count("exact_duplicate") >= 30 and kinds.count("near_duplicate") >= 40


def test_near_duplicates_are_removed_at_the_goal_precision_and_recall(corpus, deduplicated) -> None:
    """Goal: recall >= 0.95 of the injected near duplicates at precision >= 0.99 of what is removed."""
    _, truth = corpus
    kept_of = {m.cluster: m.document.url for m in deduplicated.members if m.status == "kept"}
    removed = [m for m in deduplicated.members if m.status != "kept"]
    right = [m for m in removed if _original(m.document.url, truth) == _original(kept_of[m.cluster], truth)]
    near = [url for url, record in truth.items() if record["kind"] == "near_duplicate"]
    found = {m.document.url for m in right if m.status == "near duplicate"}
    present = {d.url for shard in deduplicated.shards for d in read_documents(shard, Skips())}
    near = [url for url in near if url in present and truth[url]["copy_of"] in present]
    assert len(right) / len(removed) >= 0.99
    assert len(found & set(near)) / len(near) >= 0.95
    assert deduplicated.clusters.counts.near_duplicates >= 0.95 * len(near)


def test_exact_duplicates_are_removed_and_counted(corpus, deduplicated) -> None:
    _, truth = corpus
    status = {m.document.url: m.status for m in deduplicated.members}
    exact = [
        d.url
        for s in deduplicated.shards
        for d in read_documents(s, Skips())
        if truth[d.url]["kind"] == "exact_duplicate"
    ]
    assert exact and all(status[url] == "exact duplicate" for url in exact)
    assert deduplicated.clusters.counts.exact_duplicates == len(exact)
    assert sum(a.removed["exact duplicate"] for a in deduplicated.applied) == len(exact)
    kept_urls = {d.url for shard in deduplicated.kept for d in shard}
    assert not kept_urls & set(exact) and all(truth[url]["copy_of"] in kept_urls for url in exact)


def test_every_removed_document_is_in_a_cluster_with_the_first_of_it_kept(deduplicated) -> None:
    position = {}
    for shard in deduplicated.shards:
        for document in read_documents(shard, Skips()):
            position[document.id] = len(position)
    kept = {d.id for shard in deduplicated.kept for d in shard}
    removed = set(position) - kept
    clusters = defaultdict(list)
    for member in deduplicated.members:
        clusters[member.cluster].append(member)
    for cluster, members in clusters.items():
        assert len(members) >= 2
        assert [m.status for m in members].count("kept") == 1
        first = next(m for m in members if m.status == "kept")
        assert position[first.document.id] == cluster == min(position[m.document.id] for m in members)
        assert first.document.id in kept and all(m.document.id in removed for m in members if m is not first)
    assert {m.document.id for m in deduplicated.members if m.status != "kept"} == removed
    assert sum(a.kept for a in deduplicated.applied) == len(kept)
    counts = deduplicated.clusters.counts
    assert counts.clusters == len(clusters) and counts.exact_duplicates + counts.near_duplicates == len(removed)
    assert json.loads(json.dumps(deduplicated.members[0].to_json()))["cluster"] == deduplicated.members[0].cluster


def test_a_shard_s_signatures_are_the_same_bytes_in_another_process(corpus, tmp_path) -> None:
    """No salted hash() anywhere: another process, with another hash seed, writes the same bytes."""
    shard = corpus[0][0]
    config = DedupConfig(paragraphs=ParagraphDedup())
    map_shard(read_documents(shard, Skips()), config, tmp_path / "here")
    code = (
        "import sys; from pathlib import Path; from rules.webdata.blocks.dedup.signatures import map_shard;"
        "from rules.webdata.blocks.dedup.config import DedupConfig, ParagraphDedup;"
        "from rules.webdata.blocks.documents import Skips, read_documents;"
        "config = DedupConfig(paragraphs=ParagraphDedup());"
        "map_shard(read_documents(Path(sys.argv[1]), Skips()), config, Path(sys.argv[2]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code, str(shard), str(tmp_path / "there")], check=True, env=env)
    here = {p.name: p.read_bytes() for p in sorted((tmp_path / "here").iterdir())}
    there = {p.name: p.read_bytes() for p in sorted((tmp_path / "there").iterdir())}
    assert here == there and set(here) == {"content.npy", "minhash.npy", "paragraphs.npy", "paragraph_counts.npy"}
    map_shard(read_documents(shard, Skips()), DedupConfig(fuzzy=FuzzyDedup(seed=1)), tmp_path / "seed1")
    assert (tmp_path / "seed1" / MINHASH).read_bytes() != here[MINHASH]


def test_signature_agreement_estimates_the_jaccard_similarity_of_shingles(tmp_path) -> None:
    words = [f"word{i}" for i in range(150)]
    texts = [" ".join(words[:100]), " ".join(words[50:]), " ".join(words[:100] + ["extra"])]
    _write_shards(tmp_path / "docs", [texts])
    map_shard(read_documents(tmp_path / "docs/0/shard-00000.jsonl", Skips()), DedupConfig(), tmp_path / "map")
    signatures = np.load(tmp_path / "map" / MINHASH)  # (bands, documents, rows)
    agreement = np.mean(signatures[:, 0] == signatures[:, 1])
    assert abs(agreement - 46 / 146) < 0.15  # 96 shingles each, 46 shared; std of the estimate 0.05
    assert np.mean(signatures[:, 0] == signatures[:, 2]) > 0.9  # 96 of 97


def _synthetic_maps(directory: Path, documents: int, shards: int, fuzzy: FuzzyDedup) -> list[Path]:
    """Map outputs of random signatures, the last tenth of the documents copies of the others'."""
    rng = np.random.default_rng(0)
    minhash = rng.integers(0, 2**32, size=(fuzzy.bands, documents, fuzzy.rows), dtype=np.uint32)
    content = rng.integers(0, 2**63, size=(documents, 2), dtype=np.uint64)
    originals = documents - documents // 10
    minhash[:, originals:] = minhash[:, rng.integers(0, originals, size=documents - originals)]
    maps = []
    for index, part in enumerate(np.array_split(np.arange(documents), shards)):
        maps.append(directory / f"{index:05d}")
        ShardSignatures(content[part], np.ascontiguousarray(minhash[:, part])).save(maps[-1])
    return maps


def _peak_bytes(maps: list[Path], config: DedupConfig, out: Path) -> tuple[int, Clusters]:
    tracemalloc.start()
    try:
        found = find_clusters(maps, config, out)
        return tracemalloc.get_traced_memory()[1], found
    finally:
        tracemalloc.stop()


def test_the_reduce_holds_one_band_at_a_time_not_the_signatures(tmp_path) -> None:
    """Its memory (numpy's allocations, traced) does not grow with the signature's length:
    8 times the bands take the same peak (about 85 bytes a document) but for the candidate
    pairs' signatures compared at once (VERIFY_BYTES), far below the signatures' size."""
    documents = 100_000
    peaks = {}
    for bands in (8, 64):
        config = DedupConfig(fuzzy=FuzzyDedup(bands=bands, rows=2))
        maps = _synthetic_maps(tmp_path / f"maps{bands}", documents, 4, config.fuzzy)
        peaks[bands], found = _peak_bytes(maps, config, tmp_path / f"out{bands}")
        assert found.counts.near_duplicates == documents // 10  # the copies, found
    signature_bytes = documents * 64 * 2 * 4
    assert peaks[64] - peaks[8] < 1.5 * VERIFY_BYTES, peaks  # only the pairs compared at once grow
    assert peaks[64] < signature_bytes / 4, (peaks, signature_bytes)


def test_a_document_is_removed_only_if_like_the_one_its_cluster_keeps_not_by_chaining(tmp_path) -> None:
    """B agrees with A on 17 bands of 25, C with B on 17, C with A on 9 only (below the
    threshold); D is A's signature again (another text). C, first, is kept and B removed
    as like it, but A, like C only through B, is not removed: it is clustered again with
    the others unlike C, and kept, with D removed as its near duplicate."""
    fuzzy = FuzzyDedup()
    rng = np.random.default_rng(3)
    a = rng.integers(0, 2**32, size=(fuzzy.bands, 1, fuzzy.rows), dtype=np.uint32)
    b, c = a.copy(), a.copy()
    b[:8] = rng.integers(0, 2**32, size=(8, 1, fuzzy.rows), dtype=np.uint32)
    c[:16] = b[:16]
    c[8:16] = rng.integers(0, 2**32, size=(8, 1, fuzzy.rows), dtype=np.uint32)
    assert np.mean(a == c) < fuzzy.threshold <= min(np.mean(a == b), np.mean(b == c))
    content = rng.integers(0, 2**63, size=(4, 2), dtype=np.uint64)
    maps = [tmp_path / "0", tmp_path / "1"]
    ShardSignatures(content[:1], c).save(maps[0])
    ShardSignatures(content[1:], np.concatenate([a, b, a], axis=1)).save(maps[1])
    found = find_clusters(maps, DedupConfig(fuzzy=fuzzy), tmp_path / "out")
    decisions = [np.load(d.clusters).tolist() for d in found.shards]
    assert decisions == [[(0, KEPT)], [(1, KEPT), (0, NEAR), (1, NEAR)]]
    assert (found.counts.clusters, found.counts.near_duplicates) == (2, 2)
    assert (found.counts.rounds, found.counts.unverified) == (2, 2)  # A and D went again


def test_exact_dedup_compares_normalised_text_and_keeps_the_first_by_shard_then_line(tmp_path) -> None:
    text = "The same page, served twice.\n\nIts second paragraph."
    shards = _write_shards(
        tmp_path / "docs",
        [["A page of its own.", text], ["  The same page,\tserved twice.\n\n\nIts second paragraph. ", text]],
    )
    result = _dedup(shards, DedupConfig(fuzzy=None), tmp_path / "work")
    assert [[d.id for d in shard] for shard in result.kept] == [["0:0", "0:1"], []]
    assert [(m.document.id, m.status, m.cluster) for m in result.members] == [
        ("0:1", "kept", 1), ("1:0", "exact duplicate", 1), ("1:1", "exact duplicate", 1),
    ]  # fmt: skip
    other = _dedup(shards, DedupConfig(fuzzy=None, exact=False, paragraphs=ParagraphDedup()), tmp_path / "other")
    assert other.clusters.counts.exact_duplicates == 0 and other.clusters.counts.duplicate_paragraphs == 4


def test_paragraph_dedup_removes_paragraphs_seen_before_and_documents_left_empty(tmp_path) -> None:
    p1, p2, p3, p4 = (f"Paragraph number {n} of this test, long enough to be a paragraph." for n in range(1, 5))
    shards = _write_shards(
        tmp_path / "docs",
        [[f"{p1}\n\n{p2}", f"{p2}\n\n{p3}\n\n{p3}"], [p1, f"{p4}\n\n  {p2.replace(' ', '  ')}"]],
    )
    result = _dedup(shards, DedupConfig(exact=False, fuzzy=None, paragraphs=ParagraphDedup()), tmp_path / "work")
    assert [[d.text for d in shard] for shard in result.kept] == [[f"{p1}\n\n{p2}", p3], [p4]]
    assert [(a.paragraphs_removed, a.emptied, a.kept) for a in result.applied] == [(2, 0, 2), (2, 1, 1)]
    counts = result.clusters.counts
    assert (counts.paragraphs, counts.duplicate_paragraphs) == (8, 4)


def test_the_paragraphs_of_a_removed_duplicate_are_not_considered(tmp_path) -> None:
    page = "A first paragraph of the page, long enough.\n\nAnd its second paragraph, long enough too."
    shards = _write_shards(tmp_path / "docs", [[page], [page, "A first paragraph of the page, long enough."]])
    result = _dedup(shards, DedupConfig(fuzzy=None, paragraphs=ParagraphDedup()), tmp_path / "work")
    assert [[d.text for d in shard] for shard in result.kept] == [[page], []]
    assert result.clusters.counts.paragraphs == 3 and result.applied[1].emptied == 1


def test_decisions_applied_to_another_shard_fail_the_step(tmp_path) -> None:
    shards = _write_shards(tmp_path / "docs", [["one", "two", "three"], ["four"]])
    result = _dedup(shards, DedupConfig(), tmp_path / "work")
    with pytest.raises(StepFailed, match="not those its decisions were made for"):
        list(Deduplication(result.clusters.shards[0]).run(read_documents(shards[1], Skips())))
    with pytest.raises(StepFailed, match="more documents than its decisions"):
        list(Deduplication(result.clusters.shards[1]).run(read_documents(shards[0], Skips())))


def test_a_shard_without_documents_maps_and_reduces(tmp_path) -> None:
    shards = _write_shards(tmp_path / "docs", [["only one document here"]])
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "shard.jsonl").write_text("")
    result = _dedup(
        [tmp_path / "empty" / "shard.jsonl", *shards], DedupConfig(paragraphs=ParagraphDedup()), tmp_path / "w"
    )
    assert [len(shard) for shard in result.kept] == [0, 1] and result.clusters.counts.documents == 1
    assert np.load(tmp_path / "w" / "maps" / "00000" / CONTENT).shape == (0, 2)


@pytest.mark.parametrize(
    ("spec", "message", "hint"),
    [
        ({"fuzzy": {"ngram": 0}}, "fuzzy dedup: 'ngram' must be at least 1", None),
        ({"fuzzy": {"bands": "many"}}, "fuzzy dedup: 'bands' must be an int, got 'many'", None),
        ({"fuzzy": {"rows": True}}, "'rows' must be an int, got True", None),
        ({"fuzzy": {"threshold": 1.5}}, "'threshold' must be above 0 and at most 1, got 1.5", None),
        ({"fuzzy": {"seed": -1}}, "'seed' must be between 0 and 2**63 - 1", None),
        ({"fuzzy": {"bands": 64, "rows": 32}}, "bands x rows is 2048 hash functions, more than 1024", None),
        (
            {"fuzzy": {"bands": 2, "rows": 8, "threshold": 0.6}},
            "2 bands of 8 rows make a pair of similarity 0.6 (the threshold) a candidate with probability 0.03",
            None,
        ),
        ({"fuzzy": {"band": 20}}, "fuzzy dedup has no parameter 'band': its parameters are ngram, bands,", "'bands'"),
        ({"fuzzy": [5, 20]}, "fuzzy dedup: expected a dict of parameters, got [5, 20]", None),
        ({"paragraphs": {"false_positive_rate": 0}}, "paragraph dedup: 'false_positive_rate' must be above 0", None),
        ({"exact": "yes"}, "dedup: 'exact' must be a bool, got 'yes'", None),
        ({"exact": False, "fuzzy": None}, "all off, so it would remove nothing", None),
    ],
)
def test_bad_dedup_parameters_are_errors_naming_what_is_valid(spec, message, hint) -> None:
    with pytest.raises(AttrError) as raised:
        DedupConfig.from_spec(**spec)
    assert message in str(raised.value)
    assert hint is None or hint in raised.value.hint


def test_a_spec_gives_the_config_back_with_every_parameter() -> None:
    config = DedupConfig.from_spec(fuzzy={"bands": 20, "rows": 5, "threshold": 1}, paragraphs=True)
    assert config == DedupConfig(True, FuzzyDedup(bands=20, rows=5, threshold=1.0), ParagraphDedup())
    assert config.to_json() == {
        "exact": True,
        "fuzzy": {"ngram": 5, "bands": 20, "rows": 5, "threshold": 1.0, "seed": 0},
        "paragraphs": {"false_positive_rate": 0.001},
    }
    assert DedupConfig.from_spec(**config.to_json()) == config
    assert DedupConfig.from_spec().fuzzy == FuzzyDedup() and DedupConfig.from_spec().paragraphs is None


def test_making_the_config_imports_no_numpy() -> None:
    """BUILD files are loaded with dedup's parameters checked: that must not import numpy."""
    code = (
        "import sys; from rules.webdata.blocks.dedup.config import DedupConfig; "
        "DedupConfig.from_spec(fuzzy={'bands': 20, 'rows': 5}, paragraphs=True); print('numpy' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# -- the reduce in units (partitioned.py) ----------------------------------------------------


def _in_units(maps: list[Path], config: DedupConfig, unit_documents: int, work: Path) -> Clusters:
    """`PartitionedReduce` with each unit run here, one after another, into a directory of
    its own (the step runs them through `ctx.map_shards`: tests/rules/webdata/test_dedup.py)."""
    ran: list[str] = []

    def run_wave(wave: str, units: Sequence[ShardUnit]) -> list[ShardResult]:
        results = []
        for unit in units:
            out = work / "units" / f"{len(ran):05d}"
            out.mkdir(parents=True)
            WAVES[wave](unit.files, unit.attrs, out)
            ran.append(unit.name)
            results.append(ShardResult(unit.name, str(len(ran)), out, tuple(p.name for p in out.iterdir()), True))
        return results

    return PartitionedReduce(maps, config, unit_documents, run_wave).run(work / "decisions")


def _same_decisions(maps: list[Path], config: DedupConfig, unit_documents: int, work: Path) -> ClusterCounts:
    whole = find_clusters(maps, config, work / "whole")
    parts = _in_units(maps, config, unit_documents, work / "parts")
    assert parts.counts == whole.counts
    for one, other in zip(whole.shards, parts.shards, strict=True):
        assert np.load(one.clusters).tolist() == np.load(other.clusters).tolist()
        if config.paragraphs:
            assert np.load(one.paragraphs).tolist() == np.load(other.paragraphs).tolist()
    return whole.counts


def _copies(directory: Path, documents: int, shards: int, seed: int) -> list[Path]:
    """Random signatures in shards of uneven sizes, a third of the documents copies of
    others anywhere in the corpus (earlier or later, in any shard): a ninth exact, the
    rest with up to half of their bands changed, so some pass the threshold and some not."""
    fuzzy = FuzzyDedup()
    rng = np.random.default_rng(seed)
    minhash = rng.integers(0, 2**32, size=(fuzzy.bands, documents, fuzzy.rows), dtype=np.uint32)
    content = rng.integers(0, 2**63, size=(documents, 2), dtype=np.uint64)
    sources, copies = rng.integers(0, documents, size=(2, documents // 3))
    minhash[:, copies] = minhash[:, sources]
    content[copies[: len(copies) // 3]] = content[sources[: len(copies) // 3]]
    for copy in copies[len(copies) // 3 :]:
        changed = rng.integers(0, fuzzy.bands // 2)
        minhash[:changed, copy] = rng.integers(0, 2**32, size=(changed, fuzzy.rows), dtype=np.uint32)
    cuts = np.sort(rng.choice(np.arange(1, documents), size=shards - 1, replace=False))
    maps = []
    for index, part in enumerate(np.split(np.arange(documents), cuts)):
        maps.append(directory / f"{index:05d}")
        ShardSignatures(content[part], np.ascontiguousarray(minhash[:, part])).save(maps[-1])
    return maps


def _chain(directory: Path, length: int, seed: int) -> list[Path]:
    """An adversarial chain: each document like the one before it (8 of 25 bands changed:
    0.68 of the values agree) and unlike those two or more away, in a shuffled order over
    4 shards: union-find joins the whole chain, and each round keeps what is like its root."""
    fuzzy = FuzzyDedup()
    rng = np.random.default_rng(seed)
    chain = [rng.integers(0, 2**32, size=(fuzzy.bands, fuzzy.rows), dtype=np.uint32)]
    for _ in range(length - 1):
        link = chain[-1].copy()
        link[rng.choice(fuzzy.bands, size=8, replace=False)] = rng.integers(0, 2**32, size=(8, fuzzy.rows))
        chain.append(link)
    minhash = np.stack([chain[i] for i in rng.permutation(length)], axis=1)
    content = rng.integers(0, 2**63, size=(length, 2), dtype=np.uint64)
    maps = []
    for index, part in enumerate(np.array_split(np.arange(length), 4)):
        maps.append(directory / f"{index:05d}")
        ShardSignatures(content[part], np.ascontiguousarray(minhash[:, part])).save(maps[-1])
    return maps


@pytest.mark.parametrize("unit_documents", [7, 40, 10_000])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_reduce_in_units_decides_as_the_one_process_reduce(tmp_path, seed, unit_documents) -> None:
    """Copies across shards, exact and near, some near the threshold: the same decisions and
    counts in units of 7 documents (43 ranges), of 40, and in one unit of each wave."""
    counts = _same_decisions(_copies(tmp_path / "maps", 300, 5, seed), DedupConfig(), unit_documents, tmp_path)
    assert counts.exact_duplicates > 0 and counts.near_duplicates > 0 and counts.rounds >= 2


@pytest.mark.parametrize("unit_documents", [5, 9])
def test_the_reduce_in_units_follows_an_adversarial_chain_round_after_round(tmp_path, unit_documents) -> None:
    counts = _same_decisions(_chain(tmp_path / "maps", 60, 1), DedupConfig(), unit_documents, tmp_path)
    assert counts.rounds >= 5 and counts.unverified > counts.documents  # many rounds, each of many


@pytest.mark.parametrize(
    "config",
    [DedupConfig(fuzzy=None), DedupConfig(exact=False), DedupConfig(fuzzy=FuzzyDedup(bands=9, rows=2, threshold=0.5))],
    ids=["exact only", "fuzzy only", "other bands"],
)
def test_the_reduce_in_units_decides_as_the_one_process_reduce_for_each_dedup(tmp_path, config) -> None:
    fuzzy = config.fuzzy or FuzzyDedup()
    maps = _synthetic_maps(tmp_path / "maps", 400, 6, fuzzy)
    _same_decisions(maps, config, 33, tmp_path)


def test_the_reduce_in_units_decides_as_the_one_process_reduce_on_the_generated_corpus(corpus, tmp_path) -> None:
    """The generated web corpus, with paragraph dedup (which runs in the driver after either)."""
    config = DedupConfig(paragraphs=ParagraphDedup())
    maps = []
    for index, shard in enumerate(corpus[0]):
        maps.append(tmp_path / "maps" / f"{index:05d}")
        map_shard(read_documents(shard, Skips()), config, maps[-1])
    counts = _same_decisions(maps, config, 50, tmp_path)
    assert counts.near_duplicates > 0 and counts.duplicate_paragraphs > 0


def test_the_reduce_in_units_of_an_empty_shard_and_of_nothing(tmp_path) -> None:
    fuzzy = FuzzyDedup()
    empty = tmp_path / "maps" / "empty"
    ShardSignatures(np.empty((0, 2), np.uint64), np.empty((fuzzy.bands, 0, fuzzy.rows), np.uint32)).save(empty)
    maps = [empty, *_copies(tmp_path / "maps", 50, 2, 3), empty]
    _same_decisions(maps, DedupConfig(), 8, tmp_path / "some")
    assert _same_decisions([empty], DedupConfig(), 8, tmp_path / "none").documents == 0
