"""Deduplication: MinHash signatures by numpy (marinbuild's) vs datasketch, the reduce's
memory on 1,000,000 documents, and the Bloom filter of paragraph dedup vs a set.

Measured in one run:

- signatures: the English content pages (originals, exact and near duplicates) of a
  generated raw web corpus (rules/webdata/blocks/raw_corpus/), extracted, then signed by
  `rules.webdata.blocks.dedup.signatures.map_shard` (numpy over a batch of documents; its content and word
  hashes included) and by datasketch 2.0 (`MinHash.update_batch` over the same shingles:
  5-grams of the same lowercased word tokens, joined and encoded; the shingling alone
  timed with it), each in its own process pinned to one core, the loop alone timed in CPU
  seconds (`--repeat` times, median). The quality of each: both signatures go through the
  same `find_clusters`, scored against the ground truth (precision of what is removed,
  recall of the injected near duplicates). datasketch is the peer, installed only in the
  benchmarks' peer environment ($MARINBUILD_BENCH_PEERS_VENV, default /work/bench-venv:
  `pip install datasketch`), never a dependency of marinbuild;
- the reduce: `find_clusters` over synthetic signatures of `--documents` documents in
  shards of 10,000 (the default parameters' 25 bands of 4 rows; in each shard 5% exact
  and 10% near copies of its earlier documents, 5 of 25 bands changed), in a process of
  its own: the process's peak resident memory (`ru_maxrss`) and its resident memory once
  its imports are done, the peak of the reduce's heap (numpy's arrays, by `tracemalloc`),
  and its seconds; and the same at a tenth of the documents, the heap's growth per
  document;
- the Bloom filter: `--paragraphs` random 64-bit paragraph hashes, 30% of them repeats,
  checked and added as `find_clusters` does (membership of a batch, then `update`), by
  rbloom and by a Python set: items per CPU second, bytes per item, and rbloom's observed
  false-positive rate on as many fresh hashes.

Usage: ``python bench/dedup.py [--pages N] [--seed S] [--stdlib-modules M] [--repeat R]
[--documents N] [--paragraphs N] [--skip-datasketch] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

import benchlib
import numpy as np

CONTENT_KINDS = ("original", "exact_duplicate", "near_duplicate")
SHARD_DOCUMENTS = 10_000
WORD = re.compile(r"\w+")  # as rules.webdata.blocks.dedup tokenises


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.add_raw_corpus_args(parser)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per signer (default: %(default)s)")
    parser.add_argument(
        "--documents", type=int, default=1_000_000, help="synthetic documents of the reduce (default: %(default)s)"
    )
    parser.add_argument(
        "--paragraphs", type=int, default=1_000_000, help="paragraph hashes of the Bloom filter (default: %(default)s)"
    )
    parser.add_argument("--skip-datasketch", action="store_true", help="measure marinbuild's signatures alone")
    parser.add_argument("--json-out", type=Path, help="also write results as JSON here")
    parser.add_argument("--worker", nargs=3, metavar=("WHAT", "IN", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pages < 10 or args.repeat < 1 or args.documents < 100 or args.paragraphs < 10:
        parser.error("need --pages >= 10, --repeat >= 1, --documents >= 100 and --paragraphs >= 10")
    return args


# -- workers: each in its own process --------------------------------------------------------------


def _sign_numpy(texts: list[str], out: Path) -> float:
    from rules.webdata.blocks.dedup.config import DedupConfig
    from rules.webdata.blocks.dedup.signatures import map_shard
    from rules.webdata.blocks.documents import Document

    documents = [Document(text, str(number)) for number, text in enumerate(texts)]
    cpu = time.process_time()
    map_shard(documents, DedupConfig(), out)
    return time.process_time() - cpu


def _sign_datasketch(texts: list[str], out: Path) -> float:
    from datasketch import MinHash

    ngram, hashes = 5, 100  # marinbuild's defaults: 5-grams, 25 bands x 4 rows
    cpu = time.process_time()
    signatures = []
    for text in texts:
        words = WORD.findall(text.lower())
        shingles = [" ".join(words[i : i + ngram]).encode() for i in range(max(1, len(words) - ngram + 1))]
        minhash = MinHash(num_perm=hashes, seed=1)
        minhash.update_batch(shingles)
        signatures.append(minhash.hashvalues)
    elapsed = time.process_time() - cpu
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "datasketch.npy", np.array(signatures, dtype=np.uint32))
    return elapsed


def _reduce(maps_list: Path, out: Path) -> dict[str, float]:
    from rules.webdata.blocks.dedup.clusters import find_clusters
    from rules.webdata.blocks.dedup.config import DedupConfig

    maps = [Path(line) for line in maps_list.read_text().splitlines()]
    before = int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()  # resident now
    tracemalloc.start()
    cpu, wall = time.process_time(), time.perf_counter()
    found = find_clusters(maps, DedupConfig(), out)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    traced = tracemalloc.get_traced_memory()[1]
    return {
        "cpu_s": cpu,
        "wall_s": wall,
        "baseline_rss_bytes": before,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "traced_peak_bytes": traced,
        **{f"found_{name}": value for name, value in found.counts.to_json().items()},
    }


def worker(what: str, source: Path, out: Path) -> None:
    if what == "reduce":
        result: dict[str, float] = _reduce(source, out / "clusters")
    else:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        texts = [json.loads(line)["text"] for line in source.read_text().splitlines()]
        sign = _sign_numpy if what == "numpy" else _sign_datasketch
        result = {"cpu_s": sign(texts, out)}
    (out / "result.json").write_text(json.dumps(result))


def run_worker(python: Path | str, what: str, source: Path, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([python, __file__, "--worker", what, str(source), str(out)], check=True)
    return json.loads((out / "result.json").read_text())


# -- signatures ---------------------------------------------------------------------------------


def content_documents(args: argparse.Namespace, work: Path) -> tuple[Path, list[str], dict[str, dict]]:
    """The corpus's English content pages, extracted, as JSON lines; their URLs; the ground truth."""
    from rules.webdata.blocks.documents import Skips
    from rules.webdata.blocks.extract import read_warc
    from rules.webdata.blocks.raw_corpus.pages import RawCorpusSpec
    from rules.webdata.blocks.raw_corpus.warc import GROUND_TRUTH, WARC_DIRECTORY, write_raw_corpus

    spec = RawCorpusSpec(seed=args.seed, pages=args.pages, stdlib_modules=args.stdlib_modules)
    benchlib.log(f"generating {args.pages} pages")
    write_raw_corpus(spec, work / "raw")
    truth = {r["url"]: r for r in map(json.loads, (work / "raw" / GROUND_TRUTH).read_text().splitlines())}
    documents = [
        document
        for warc in sorted((work / "raw" / WARC_DIRECTORY).iterdir())
        for document in read_warc(warc, Skips())
        if truth[document.url]["kind"] in CONTENT_KINDS
    ]
    with open(work / "documents.jsonl", "w") as out:
        out.writelines(json.dumps({"text": document.text}) + "\n" for document in documents)
    return work / "documents.jsonl", [document.url for document in documents], truth


def dedup_quality(map_dir: Path, urls: list[str], truth: dict[str, dict], out: Path) -> dict[str, float]:
    """Precision of what `find_clusters` removes over `map_dir`, and recall of the near duplicates."""
    from rules.webdata.blocks.dedup.clusters import EXACT, KEPT, NEAR, find_clusters
    from rules.webdata.blocks.dedup.config import DedupConfig

    found = find_clusters([map_dir], DedupConfig(), out)
    decisions = np.load(found.shards[0].clusters)
    kept = {int(c): urls[i] for i, (c, status) in enumerate(decisions.tolist()) if status == KEPT}

    def original(url: str) -> str:
        return truth[url]["copy_of"] or url

    removed = [(urls[i], kept[int(c)], status) for i, (c, status) in enumerate(decisions.tolist()) if status >= EXACT]
    right = [(url, status) for url, first, status in removed if original(url) == original(first)]
    present = set(urls)
    near = [u for u in urls if truth[u]["kind"] == "near_duplicate" and truth[u]["copy_of"] in present]
    found_near = {url for url, status in right if status == NEAR}
    return {
        "precision": len(right) / len(removed) if removed else 1.0,
        "near_recall": len(found_near & set(near)) / len(near) if near else 1.0,
        "near_duplicates": len(near),
    }


def signatures(args: argparse.Namespace, work: Path) -> tuple[int, dict[str, dict]]:
    documents, urls, truth = content_documents(args, work)
    signers = {"numpy": sys.executable}
    if not args.skip_datasketch and (python := benchlib.peer_python("datasketch", "datasketch")):
        signers["datasketch"] = str(python)
    results: dict[str, dict] = {}
    for name, python in signers.items():
        samples = []
        for attempt in range(args.repeat):
            benchlib.log(f"signatures by {name}: run {attempt + 1} of {args.repeat}")
            samples.append(run_worker(python, name, documents, work / f"sign-{name}")["cpu_s"])
        cpu = statistics.median(samples)
        results[name] = {"cpu_s": cpu, "documents_per_cpu_s": len(urls) / cpu}
    numpy_map = work / "sign-numpy"
    results["numpy"].update(dedup_quality(numpy_map, urls, truth, work / "clusters-numpy"))
    if "datasketch" in results:
        from rules.webdata.blocks.dedup.config import FuzzyDedup
        from rules.webdata.blocks.dedup.signatures import CONTENT, ShardSignatures

        fuzzy = FuzzyDedup()
        values = np.load(work / "sign-datasketch" / "datasketch.npy")
        minhash = values.reshape(len(urls), fuzzy.bands, fuzzy.rows).transpose(1, 0, 2)
        ShardSignatures(np.load(numpy_map / CONTENT), np.ascontiguousarray(minhash)).save(work / "map-datasketch")
        results["datasketch"].update(dedup_quality(work / "map-datasketch", urls, truth, work / "clusters-datasketch"))
    return len(urls), results


# -- the reduce -----------------------------------------------------------------------------------


def synthetic_maps(
    directory: Path, documents: int, shard_documents: int = SHARD_DOCUMENTS, across_shards: bool = False
) -> list[Path]:
    """Map outputs of `documents` synthetic documents in shards of `shard_documents`: random
    signatures and content hashes, 5% of each shard exact and 10% near copies of its earlier
    documents (5 of the 25 bands changed), or, `across_shards`, of those and of the shard
    before it's (so that duplicates cross shards; bench/dedup_scale.py). Written a shard at
    a time: memory is one shard's, and the shard before's originals."""
    from rules.webdata.blocks.dedup.config import FuzzyDedup
    from rules.webdata.blocks.dedup.signatures import ShardSignatures

    fuzzy = FuzzyDedup()
    maps = []
    before: tuple[np.ndarray, np.ndarray] | None = None
    for index, first in enumerate(range(0, documents, shard_documents)):
        count = min(shard_documents, documents - first)
        rng = np.random.default_rng(index)
        minhash = rng.integers(0, 2**32, size=(fuzzy.bands, count, fuzzy.rows), dtype=np.uint32)
        content = rng.integers(0, 2**63, size=(count, 2), dtype=np.uint64)
        exact, near = count // 20, count // 10
        originals = count - exact - near
        pool_minhash, pool_content = minhash[:, :originals], content[:originals]
        if before is not None:
            pool_minhash = np.concatenate([pool_minhash, before[0]], axis=1)
            pool_content = np.concatenate([pool_content, before[1]])
        sources = rng.integers(0, pool_content.shape[0], size=exact + near)
        minhash[:, originals:] = pool_minhash[:, sources]
        content[originals : originals + exact] = pool_content[sources[:exact]]
        changed = rng.integers(0, 2**32, size=(5, near, fuzzy.rows), dtype=np.uint32)
        minhash[:5, originals + exact :] = changed
        maps.append(directory / f"{index:05d}")
        ShardSignatures(content, minhash).save(maps[-1])
        if across_shards:
            before = (minhash[:, :originals].copy(), content[:originals].copy())
    return maps


def reduce_memory(documents: int, work: Path) -> dict[str, float]:
    benchlib.log(f"writing the signatures of {documents} synthetic documents")
    maps = synthetic_maps(work / f"maps-{documents}", documents)
    (work / f"maps-{documents}.txt").write_text("".join(f"{path}\n" for path in maps))
    benchlib.log(f"reducing {documents} documents")
    result = run_worker(sys.executable, "reduce", work / f"maps-{documents}.txt", work / f"reduce-{documents}")
    result["documents"] = documents
    result["signature_bytes"] = sum((path / "minhash.npy").stat().st_size for path in maps)
    return result


# -- the Bloom filter ---------------------------------------------------------------------------


def bloom(paragraphs: int, false_positive_rate: float) -> dict[str, dict[str, float]]:
    """rbloom and a set, each batch of 10 x SHARD_DOCUMENTS hashes handled as `find_clusters`
    handles a shard's: its repeats found by a sort, its first occurrences looked up, then added."""
    from rbloom import Bloom

    rng = np.random.default_rng(0)
    distinct = rng.integers(-(2**63), 2**63 - 1, size=paragraphs * 7 // 10, dtype=np.int64)
    values = np.concatenate([distinct, distinct[rng.integers(0, len(distinct), size=paragraphs - len(distinct))]])
    rng.shuffle(values)
    batches = [values[at : at + 10 * SHARD_DOCUMENTS] for at in range(0, paragraphs, 10 * SHARD_DOCUMENTS)]
    fresh = rng.integers(-(2**63), 2**63 - 1, size=paragraphs, dtype=np.int64).tolist()
    figures = {}
    for name in ("rbloom", "set"):
        tracemalloc.start()
        cpu = time.process_time()
        seen: Bloom | set[int] = Bloom(len(distinct), false_positive_rate) if name == "rbloom" else set()
        repeats = 0
        for batch in batches:
            firsts = batch[np.sort(np.unique(batch, return_index=True)[1])].tolist()
            repeats += len(batch) - len(firsts) + sum(value in seen for value in firsts)
            seen.update(firsts)
        cpu = time.process_time() - cpu
        del firsts  # what is left traced is the filter or the set, with the ints it holds
        traced = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        size = seen.size_in_bits / 8 if isinstance(seen, Bloom) else traced
        figures[name] = {
            "items_per_cpu_s": paragraphs / cpu,
            "bytes_per_item": size / len(distinct),
            "repeats": repeats,
        }
        if isinstance(seen, Bloom):
            figures[name]["false_positive_rate"] = sum(value in seen for value in fresh) / len(fresh)
    figures["repeats_generated"] = paragraphs - len(distinct)
    return figures


# -- the run --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker(args.worker[0], Path(args.worker[1]), Path(args.worker[2]))
        return 0
    from rules.webdata.blocks.dedup.config import ParagraphDedup

    load_before = benchlib.load_average()
    with tempfile.TemporaryDirectory(prefix="marinbuild-bench-dedup-") as tmp:
        work = Path(tmp)
        documents, signers = signatures(args, work)
        reduces = [reduce_memory(n, work) for n in (args.documents // 10, args.documents)]
    small, large = reduces
    growth = (large["traced_peak_bytes"] - small["traced_peak_bytes"]) / (large["documents"] - small["documents"])
    blooms = bloom(args.paragraphs, ParagraphDedup().false_positive_rate)
    ratios = {
        "rbloom_to_set_bytes_per_item": blooms["rbloom"]["bytes_per_item"] / blooms["set"]["bytes_per_item"],
        "rbloom_to_set_items_per_cpu_s": blooms["rbloom"]["items_per_cpu_s"] / blooms["set"]["items_per_cpu_s"],
    }
    if "datasketch" in signers:
        ratios["numpy_to_datasketch_documents_per_cpu_s"] = (
            signers["numpy"]["documents_per_cpu_s"] / signers["datasketch"]["documents_per_cpu_s"]
        )
    report = {
        "documents": documents,
        "signatures": signers,
        "reduce": reduces,
        "reduce_heap_bytes_per_document": growth,
        "bloom": blooms,
        "ratios": ratios,
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": benchlib.load_average(),
        },
    }
    print(json.dumps(report, indent=2))
    if args.json_out:
        benchlib.write_json(args.json_out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
