"""Filters and dedup: marinbuild's `filter_text` and `dedup` against datatrove, on one corpus.

Measured in one run, on the same documents:

- the corpus: JSON lines of documents made from the generated raw web corpus
  (rules/webdata/blocks/raw_corpus/: pages of the standard library's documentation in the
  chrome of four kinds of site, 5% exact and 5% near duplicates, boilerplate, low-quality
  and non-English pages injected), each page's main text extracted as `extract_text`
  extracts it (Resiliparse), the pages without any left out, `{"text", "id", "url"}` a
  line, in `--shards` shards of the layout every data rule writes (`train/shard-*.jsonl`,
  `summary.json`); `--pages 340000` (the default) makes about 500 MB;
- marinbuild: real builds, in a workspace of their own, of a `filegroup` of the corpus (its
  ingestion, timed apart), then of `filter_text` (the Gopher quality, C4 and Gopher
  repetition filters, their defaults) and `dedup` of its output (exact, and MinHash: 5-word
  shingles, 25 bands of 4 rows, threshold 0.6) with `resources = {"cpu": W}`: the whole
  `marinbuild build` command timed, the engine included (loading, keys, the units' worker
  processes, hashing and publishing every output), its CPU time that of the command and
  every process it waited for;
- datatrove, the peer: the same chain (`GopherQualityFilter`, `C4QualityFilter`,
  `GopherRepetitionFilter`, each keeping what it rejects through an exclusion writer, as
  filter_text keeps `rejected/`) and its four MinHash stages (signatures, buckets, clusters,
  filter; 5-grams, 25 buckets of 4 hashes of 32 bits) through `LocalPipelineExecutor` with
  W workers (a task per shard, a task per bucket), the whole process timed the same way.
  Its parameters are set to marinbuild's where their defaults differ (C4: at least 3
  sentences, lines of at least 5 words); words are whitespace-separated tokens and
  sentences end where marinbuild's end (`--datatrove-tokenizer words`, the default), or
  datatrove's own English tokenizer (spaCy) splits them (`spacy`). docs/benchmarks.md lists
  what else differs. datatrove is installed only in the benchmarks' peer environment
  ($MARINBUILD_BENCH_PEERS_VENV, default /work/bench-venv: `pip install
  'datatrove[processing]' spacy orjson`), never a dependency of marinbuild;

each with W = 1 and 2 workers (`--workers`): documents per CPU second, documents per
second per worker (wall clock), and their ratios, marinbuild's to datatrove's, at each
W; what the filters kept (and the share both kept); and dedup's quality against the
injected copies' ground truth: the precision of what is removed (a removed document is
right when it and its cluster's kept document copy one original; and apart, right also
when their 5-word shingles' Jaccard similarity is at least 0.6, a near duplicate the
generator made by chance, two pages mostly of one shared paragraph: rare since its
paragraphs grow with the corpus, rules/webdata/blocks/raw_corpus/) and the recall of the near and exact copies whose
original reached dedup (removed, with a kept document that copies the same original).

Usage: ``python bench/data.py [--pages N] [--seed S] [--stdlib-modules M] [--shards K]
[--workers 1,2] [--skip-datatrove] [--datatrove-tokenizer words|spacy] [--workdir DIR]
[--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import benchlib

PEER_PACKAGES = "'datatrove[processing]' spacy orjson"
FILTERS = ("gopher_quality", "c4_quality", "gopher_repetition")  # marinbuild's chain, defaults
NGRAM, BANDS, ROWS = 5, 25, 4  # marinbuild's dedup defaults, given to datatrove's MinHash
CONFIG = 'rules = ["rules.webdata.decls"]\n'
BUILD = """filegroup(name = "corpus", srcs = glob(["corpus/**"]))
filter_text(name = "filtered", data = ":corpus", filters = {filters}, resources = {{"cpu": {workers}}})
dedup(name = "deduped", data = [":filtered"], resources = {{"cpu": {workers}}})
"""
SIMILAR = 0.6  # marinbuild's MinHash threshold: the shingle similarity of a near duplicate
WORD = re.compile(r"\w+")  # as rules.webdata.blocks.dedup tokenises
# Where marinbuild's filter_text ends a sentence (rules/webdata/blocks/filters/, SENTENCE_END).
SENTENCE_END = re.compile(r"[.!?]+(?=[\"'”’)\]]*(?:\s|$))")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.add_raw_corpus_args(parser)
    parser.set_defaults(pages=340_000)
    parser.add_argument("--shards", type=int, default=8, help="shards of the corpus (default: %(default)s)")
    parser.add_argument("--workers", default="1,2", help="worker counts measured, comma-separated (default: 1,2)")
    parser.add_argument("--skip-datatrove", action="store_true", help="measure marinbuild alone")
    parser.add_argument(
        "--datatrove-tokenizer",
        choices=("words", "spacy"),
        default="words",
        help="datatrove's words and sentences: split as marinbuild's filters split them, or by its spaCy tokenizer",
    )
    parser.add_argument(
        "--datatrove-minhash",
        default=f"{BANDS}x{ROWS}",
        help="datatrove's MinHash buckets x hashes (default: marinbuild's %(default)s; datatrove's own: 14x8)",
    )
    parser.add_argument("--workdir", type=Path, help="keep the corpus and every output here (new or empty)")
    parser.add_argument("--json-out", type=Path, help="also write results as JSON here")
    parser.add_argument(
        "--worker", nargs=5, metavar=("CORPUS", "OUT", "WORKERS", "TOKENIZER", "MINHASH"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    try:
        args.workers = [int(count) for count in args.workers.split(",")]
    except ValueError:
        parser.error(f"--workers takes worker counts separated by commas, got {args.workers!r}")
    if not re.fullmatch(r"[1-9]\d*x[1-9]\d*", args.datatrove_minhash):
        parser.error(f"--datatrove-minhash takes BUCKETSxHASHES (25x4), got {args.datatrove_minhash!r}")
    if args.pages < 10 or args.shards < 1 or not args.workers or min(args.workers) < 1:
        parser.error("need --pages >= 10, --shards >= 1 and worker counts >= 1")
    return args


@dataclass(frozen=True)
class Member:
    """A document of a cluster dedup found: kept (its first) or removed."""

    url: str
    cluster: int
    removed: bool
    text: str


# -- the corpus -------------------------------------------------------------------------------

_corpus = None  # each generating process's RawCorpus, made once (its text pool takes seconds)


def _start_generator(seed: int, stdlib_modules: int | None) -> None:
    global _corpus
    from rules.webdata.blocks.raw_corpus.pages import RawCorpus, RawCorpusSpec

    _corpus = RawCorpus(RawCorpusSpec(seed=seed, pages=1, stdlib_modules=stdlib_modules))


def _write_shard(path: Path, first: int, last: int) -> tuple[int, int, list[tuple[str, str, str | None]]]:
    """Pages [first, last) as documents into the shard `path`: their count, bytes, and each
    one's (url, kind, url of the original it copies)."""
    from rules.webdata.blocks.extract import main_text

    assert _corpus is not None
    truth = []
    size = 0
    with open(path, "w", encoding="utf-8") as out:
        for index in range(first, last):
            page = _corpus.page(index)
            if page.kind == "malformed":
                continue
            text = main_text(page.payload.decode()).strip()
            if not text:  # a page of boilerplate alone: extract_text gives no document
                continue
            line = json.dumps({"text": text, "id": page.record_id, "url": page.url}, ensure_ascii=False) + "\n"
            out.write(line)
            size += len(line.encode())
            original = _corpus.page(page.copy_of).url if page.copy_of is not None else None
            truth.append((page.url, page.kind, original))
    return len(truth), size, truth


def make_corpus(args: argparse.Namespace, root: Path) -> tuple[int, int, dict[str, tuple[str, str | None]]]:
    """The corpus under `root` (train/ shards, an empty validation/, summary.json), written by
    a process per core; its documents, bytes, and the ground truth by URL."""
    (root / "train").mkdir(parents=True)
    (root / "validation").mkdir()
    bounds = [args.pages * shard // args.shards for shard in range(args.shards + 1)]
    paths = [root / "train" / f"shard-{shard:05d}.jsonl" for shard in range(args.shards)]
    benchlib.log(f"generating {args.pages} pages into {args.shards} shards")
    processes = min(len(os.sched_getaffinity(0)), args.shards)
    with ProcessPoolExecutor(
        processes, initializer=_start_generator, initargs=(args.seed, args.stdlib_modules)
    ) as pool:
        written = list(pool.map(_write_shard, paths, bounds[:-1], bounds[1:]))
    documents = sum(count for count, _, _ in written)
    truth = {url: (kind, original) for _, _, shard in written for url, kind, original in shard}
    summary = {"documents": {"train": documents, "validation": 0}, "shards": {"train": args.shards, "validation": 0}}
    (root / "summary.json").write_text(json.dumps(summary) + "\n")
    return documents, sum(size for _, size, _ in written), truth


# -- marinbuild ------------------------------------------------------------------------------------


def marinbuild_run(marinbuild: str, corpus: Path, ws: Path, workers: int) -> dict:
    """Ingest the corpus, then build filter_text and dedup over it, in a new workspace."""
    (ws / "data" / "corpus").mkdir(parents=True)
    (ws / "marinbuild.toml").write_text(CONFIG)
    for path in corpus.rglob("*"):  # hard links: the workspace's sources, not a copy
        target = ws / "data" / "corpus" / path.relative_to(corpus)
        target.mkdir(exist_ok=True) if path.is_dir() else os.link(path, target)
    filters = json.dumps([{"name": name} for name in FILTERS])
    (ws / "data" / "BUILD.marin").write_text(BUILD.format(filters=filters, workers=workers))

    def build(label: str) -> tuple[benchlib.Run, dict]:
        command = [marinbuild, "--workspace", ws, "build", label, "--jobs", str(workers), "--json"]
        run = benchlib.run_timed(command, cwd=ws)
        return run, benchlib.parse_trailing_json(run.stdout)

    benchlib.log(f"marinbuild, {workers} worker(s): ingesting the corpus")
    ingest, _ = build("//data:corpus")
    benchlib.log(f"marinbuild, {workers} worker(s): filter_text and dedup")
    run, report = build("//data:deduped")
    benchlib.check_counts(report, 3, built=2)
    outputs = {entry["label"]: Path(entry["output"]) for entry in report["targets"]}
    seconds = {entry["label"].split(":")[1]: entry["duration_s"] for entry in report["targets"]}
    filtered, deduped = outputs["//data:filtered"], outputs["//data:deduped"]
    members = [
        Member(record["url"], record["cluster"], record["status"] != "kept", record["text"])
        for record in _records(sorted((deduped / "clusters").rglob("*.jsonl")))
    ]
    return {
        "run": run,
        "ingest_s": ingest.seconds,
        "ingest_cpu_s": ingest.cpu_s,
        "step_s": {name: seconds[name] for name in ("filtered", "deduped")},
        "filtered": [record["url"] for record in _records(sorted((filtered / "train").glob("*.jsonl")))],
        "members": members,
        "kept": sum(1 for _ in _records(sorted((deduped / "train").glob("*.jsonl")))),
    }


def _records(paths: Sequence[Path]) -> Iterator[dict]:
    for path in paths:
        with open(path, encoding="utf-8") as lines:
            yield from map(json.loads, lines)


# -- datatrove: the worker runs in the peer environment, without marinbuild -----------------------


def _datatrove_words():
    """A datatrove word tokenizer that splits as marinbuild's filters do: words at whitespace,
    a sentence ending at each of SENTENCE_END's matches."""
    from datatrove.utils.word_tokenizers import WordTokenizer

    class Words(WordTokenizer):
        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text[start:end] for start, end in self.span_tokenize(text)]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            ends = [match.end() for match in SENTENCE_END.finditer(text)]
            return list(zip([0, *ends[:-1]], ends)) or [(0, len(text))]

    return Words()


def datatrove_worker(corpus: Path, out: Path, workers: int, tokenizer: str, minhash: str) -> None:
    """The chain and the MinHash stages by datatrove, over the corpus's train/ shards."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import (
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.pipeline.filters import C4QualityFilter, GopherQualityFilter, GopherRepetitionFilter
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig
    from datatrove.utils.typeshelper import Languages

    language = _datatrove_words() if tokenizer == "words" else Languages.english
    shards = len(list((corpus / "train").glob("shard-*.jsonl")))

    def writer(name: str) -> JsonlWriter:
        return JsonlWriter(str(out / name), compression=None)

    def execute(name: str, pipeline: list, tasks: int) -> None:
        started = time.perf_counter()
        logs = str(out / "logs" / name)
        LocalPipelineExecutor(
            pipeline, tasks=tasks, workers=min(workers, tasks), logging_dir=logs, start_method="fork"
        ).run()
        seconds[name] = time.perf_counter() - started

    seconds: dict[str, float] = {}
    execute(
        "filters",
        [
            JsonlReader(str(corpus / "train"), glob_pattern="shard-*.jsonl"),
            GopherQualityFilter(exclusion_writer=writer("rejected/gopher_quality"), language=language),
            C4QualityFilter(
                exclusion_writer=writer("rejected/c4_quality"),
                min_num_sentences=3,
                min_words_per_line=5,
                language=language,
            ),
            GopherRepetitionFilter(exclusion_writer=writer("rejected/gopher_repetition"), language=language),
            writer("filtered"),
        ],
        shards,
    )
    buckets, hashes = map(int, minhash.split("x"))
    config = MinhashConfig(n_grams=NGRAM, num_buckets=buckets, hashes_per_bucket=hashes, hash_config=HashConfig(32))
    files = len(list((out / "filtered").glob("*.jsonl")))  # a rank reads one file in the first and the last stage
    execute(
        "signatures",
        [
            JsonlReader(str(out / "filtered")),
            MinhashDedupSignature(str(out / "signatures"), config=config, language=language),
        ],
        files,
    )
    execute("buckets", [MinhashDedupBuckets(str(out / "signatures"), str(out / "buckets"), config=config)], buckets)
    execute(
        "clusters", [MinhashDedupCluster(str(out / "buckets"), str(out / "remove"), config, save_cluster_id=True)], 1
    )
    execute(
        "filter",
        [
            JsonlReader(str(out / "filtered")),
            MinhashDedupFilter(str(out / "remove"), exclusion_writer=writer("removed"), load_cluster_ids=True),
            writer("deduped"),
        ],
        files,
    )
    (out / "seconds.json").write_text(json.dumps(seconds))


def datatrove_run(python: Path, args: argparse.Namespace, corpus: Path, out: Path, workers: int) -> dict:
    benchlib.log(f"datatrove, {workers} worker(s): filters and MinHash dedup")
    command = [
        python,
        __file__,
        "--worker",
        corpus,
        out,
        str(workers),
        args.datatrove_tokenizer,
        args.datatrove_minhash,
    ]
    run = benchlib.run_timed(command, cwd=out.parent)

    def members(name: str, removed: bool) -> Iterator[Member]:
        for record in _records(sorted((out / name).glob("*.jsonl"))):
            if record["metadata"]["minhash_cluster_id"] >= 0:
                yield Member(
                    record["metadata"]["url"], record["metadata"]["minhash_cluster_id"], removed, record["text"]
                )

    return {
        "run": run,
        "step_s": json.loads((out / "seconds.json").read_text()),
        "filtered": [record["metadata"]["url"] for record in _records(sorted((out / "filtered").glob("*.jsonl")))],
        "members": [*members("deduped", False), *members("removed", True)],
        "kept": sum(1 for _ in _records(sorted((out / "deduped").glob("*.jsonl")))),
    }


# -- quality and the report --------------------------------------------------------------------------


def shingles(text: str) -> set[tuple[str, ...]]:
    """The 5-word shingles of marinbuild's MinHash (lowercased `\\w+` tokens): the similarity
    both tools' removals are judged by."""
    words = WORD.findall(text.lower())
    return set(zip(*(words[k:] for k in range(NGRAM)))) or {tuple(words)}


def dedup_quality(
    seen: Sequence[str], members: Sequence[Member], truth: dict[str, tuple[str, str | None]]
) -> dict[str, float | int]:
    """What dedup removed from the documents it `seen`: the precision of its removals, a
    removal right when the document and its cluster's kept one copy one original (`injected`)
    or, also, when their shingles' Jaccard similarity is at least SIMILAR (`similar`: a near
    duplicate the generator made by chance, two pages mostly of one shared paragraph); and
    the recall of the near and exact copies among them whose original it saw too."""

    def original(url: str) -> str:
        return truth[url][1] or url

    keeper = {member.cluster: member for member in members if not member.removed}
    removed = [(member, keeper.get(member.cluster)) for member in members if member.removed]
    # Counted by removal, not by URL: two mirrors of one original have one URL.
    right = [first is not None and original(member.url) == original(first.url) for member, first in removed]
    similar = [
        is_right or (first is not None and _jaccard(member.text, first.text) >= SIMILAR)
        for (member, first), is_right in zip(removed, right)
    ]
    injected = {member.url for (member, _), is_right in zip(removed, right) if is_right}
    present = set(seen)
    found = {}
    for kind in ("near_duplicate", "exact_duplicate"):
        copies = {url for url in present if truth[url][0] == kind and truth[url][1] in present}
        found[kind] = (len(injected & copies) / len(copies) if copies else 1.0, len(copies))
    return {
        "removed": len(removed),
        "precision_injected": sum(right) / len(removed) if removed else 1.0,
        "precision_similar": sum(similar) / len(removed) if removed else 1.0,
        "near_recall": found["near_duplicate"][0],
        "near_duplicates": found["near_duplicate"][1],
        "exact_recall": found["exact_duplicate"][0],
        "exact_duplicates": found["exact_duplicate"][1],
    }


def _jaccard(one: str, other: str) -> float:
    a, b = shingles(one), shingles(other)
    return len(a & b) / len(a | b)


def figures(result: dict, documents: int, workers: int, truth: dict[str, tuple[str, str | None]]) -> dict:
    run: benchlib.Run = result["run"]
    return {
        "workers": workers,
        "wall_s": run.seconds,
        "cpu_s": run.cpu_s,
        "documents_per_cpu_s": documents / run.cpu_s,
        "documents_per_s_per_worker": documents / run.seconds / workers,
        "peak_rss_mib": run.peak_rss_mib,
        "step_s": result["step_s"],
        "filters_kept": len(result["filtered"]),
        "dedup_kept": result["kept"],
        **{key: result[key] for key in ("ingest_s", "ingest_cpu_s") if key in result},
        "dedup": dedup_quality(result["filtered"], result["members"], truth),
    }


def run_benchmark(args: argparse.Namespace, work: Path) -> dict:
    marinbuild = benchlib.find_marinbuild()
    python = None if args.skip_datatrove else benchlib.peer_python("datatrove.pipeline.filters", PEER_PACKAGES)
    load_before = benchlib.load_average()
    documents, size, truth = make_corpus(args, work / "corpus")
    benchlib.log(f"{documents} documents, {size / 1e6:.1f} MB")
    tools: dict[str, dict[str, dict]] = {"marinbuild": {}, "datatrove": {}}
    agreement = {}
    for workers in args.workers:
        ours = marinbuild_run(marinbuild, work / "corpus", work / f"marinbuild-{workers}", workers)
        tools["marinbuild"][str(workers)] = figures(ours, documents, workers, truth)
        if python is not None:
            out = work / f"datatrove-{workers}"
            out.mkdir()
            theirs = datatrove_run(python, args, work / "corpus", out, workers)
            tools["datatrove"][str(workers)] = figures(theirs, documents, workers, truth)
            both, either = (
                set(ours["filtered"]) & set(theirs["filtered"]),
                set(ours["filtered"]) | set(theirs["filtered"]),
            )
            agreement[str(workers)] = len(both) / len(either) if either else 1.0
    ratios = {
        f"{workers}_workers": {
            figure: tools["marinbuild"][workers][figure] / tools["datatrove"][workers][figure]
            for figure in ("documents_per_cpu_s", "documents_per_s_per_worker")
        }
        for workers in tools["datatrove"]
    }
    scaling = {
        name: {workers: by[str(min(args.workers))]["wall_s"] / by[workers]["wall_s"] for workers in by}
        for name, by in tools.items()
        if by
    }
    return {
        "documents": documents,
        "corpus_bytes": size,
        "shards": args.shards,
        "datatrove": None
        if python is None
        else {"tokenizer": args.datatrove_tokenizer, "minhash": args.datatrove_minhash},
        "tools": {name: by for name, by in tools.items() if by},
        "ratios": ratios,
        "speedup_over_fewest_workers": scaling,
        "filters_kept_by_both_share": agreement,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": benchlib.load_average(),
            "datatrove": None if python is None else _version(python),
        },
    }


def _version(python: Path) -> str:
    script = "from importlib.metadata import version; print(version('datatrove'))"
    done = subprocess.run([python, "-c", script], capture_output=True)
    return done.stdout.decode().strip() or "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        corpus, out, workers, tokenizer, minhash = args.worker
        datatrove_worker(Path(corpus), Path(out), int(workers), tokenizer, minhash)
        return 0
    with benchlib.work_dir(args.workdir) as work:
        report = run_benchmark(args, work)
    print(json.dumps(report, indent=2))
    if args.json_out:
        benchlib.write_json(args.json_out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
