"""Main-text extraction: Resiliparse (marinbuild's) vs trafilatura, and FastWARC vs warcio.

Generates a raw web corpus (rules/webdata/blocks/raw_corpus/: WARC files of pages rendered from
the standard library's documentation, in the chrome of four kinds of site software, with
duplicates, boilerplate-only, low-quality and non-English pages) and measures, on the same
pages in one run:

- quality, against each page's known main text: token-level precision, recall and F1
  (lowercased word tokens counted as multisets) over the content pages (originals, exact
  and near duplicates, non-English), and apart over the low-quality pages; boilerplate
  leakage, the share of content pages whose extract holds any of the page's boilerplate
  phrases of three words or more (navigation, cookie notice, footer, comments, related
  links), and apart the share that keeps the post's byline (date and author); and the
  words extracted from pages of boilerplate alone (ideal: 0);
- speed: pages per second of CPU time, each extractor in its own process pinned to one
  core, the extraction loop alone timed (`--repeat` times, median);
- WARC reading: response records per CPU second through FastWARC and warcio, reading
  every record's payload, on one core;
- records to documents: the corpus's WARC files to the lines of their splits, in documents
  per CPU second on one core (reading, HTTP decoding, charset, depth check, main text and
  writing), each run in a process of its own, as a step's unit runs, its loop alone timed
  (`--repeat` times, median, the runs alternating): `rules.webdata.blocks.extract.read_warc`, each
  document a JSON line in its split's file as a unit wrote it before the budget, against
  the same of another commit (`--baseline-rev`: its rules/webdata/blocks/extract.py, from `git
  show`, loaded as a module of its own); the current code over the same pages stored as
  most crawlers store them (gzip `Content-Encoding`, chunked); and the path a build runs
  (`extract_text.extract_into`: forked children that bound each record's time and write
  the documents, `extract_worker`), in the CPU of the process and its children, checked to
  write the same bytes; apart, the CPU that path costs a file of one record.

Resiliparse runs as marinbuild calls it (`rules.webdata.blocks.extract.main_text`); trafilatura
is the peer, installed only in the benchmarks' peer environment ($MARINBUILD_BENCH_PEERS_VENV,
default /work/bench-venv: `pip install trafilatura lxml_html_clean`), never a dependency
of marinbuild. It runs with its defaults but `include_comments=False`, since comments are
not main text here.

Usage: ``python bench/extract.py [--pages N] [--seed S] [--stdlib-modules M] [--repeat R]
[--skip-trafilatura] [--baseline-rev REV] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import io
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import benchlib

if TYPE_CHECKING:  # imported where used: the peer's worker runs where marinbuild is not installed
    from rules.webdata.blocks.raw_corpus.pages import Page, RawCorpus

CONTENT_KINDS = ("original", "exact_duplicate", "near_duplicate", "non_english")
WORD = re.compile(r"\w+")
LEAK_MIN_WORDS = 3  # shorter phrases ("Home", "Log in") also occur in main text
PEER_PACKAGES = "trafilatura lxml_html_clean"
VALIDATION_FRACTION = 0.01  # extract_text's default
BUDGETED = "current, budgeted (as a build runs it)"
ONE_RECORD = "a file of one record, budgeted"
RECORDS_WORKER = "records:"  # the worker's name for records to documents, before what it runs


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.add_raw_corpus_args(parser)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per extractor (default: %(default)s)")
    parser.add_argument("--skip-trafilatura", action="store_true", help="measure Resiliparse alone")
    parser.add_argument(
        "--baseline-rev",
        help="a git revision whose rules/webdata/blocks/extract.py read_warc is measured against this one's",
    )
    parser.add_argument("--json-out", type=Path, help="also write results as JSON here")
    parser.add_argument("--worker", nargs=3, metavar=("EXTRACTOR", "PAGES", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pages < 2 or args.repeat < 1:
        parser.error("need --pages >= 2 and --repeat >= 1")
    return args


# -- the worker: one extractor in its own process, on one core -------------------------------


def _extractor(name: str) -> Callable[[str], str]:
    if name == "resiliparse":
        from rules.webdata.blocks.extract import main_text

        return main_text
    import trafilatura

    return lambda html: trafilatura.extract(html, include_comments=False) or ""


def worker(name: str, pages: Path, out: Path) -> None:
    """Extract every page of `pages` (JSON lines of {"html": ...}); write texts and CPU seconds."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    extract = _extractor(name)
    htmls = [json.loads(line)["html"] for line in pages.read_text().splitlines()]
    extract(htmls[0])  # imports and first-call set-up are not the loop's
    cpu, wall = time.process_time(), time.perf_counter()
    texts = [extract(html) for html in htmls]
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    out.write_text(json.dumps({"cpu_s": cpu, "wall_s": wall, "texts": texts}))


# -- quality --------------------------------------------------------------------------------


def token_scores(extracted: str, reference: str) -> tuple[float, float, float]:
    """Precision, recall and F1 of the extract's word tokens against the reference's."""
    got, want = Counter(WORD.findall(extracted.lower())), Counter(WORD.findall(reference.lower()))
    if not got and not want:
        return 1.0, 1.0, 1.0
    overlap = sum((got & want).values())
    precision = overlap / sum(got.values()) if got else 0.0
    recall = overlap / sum(want.values()) if want else 0.0
    return precision, recall, 2 * precision * recall / (precision + recall) if overlap else 0.0


def quality(pages: Sequence[Page], texts: Sequence[str]) -> dict[str, object]:
    """The quality figures of one extractor's `texts` of `pages`."""
    scores: dict[str, list[tuple[float, float, float]]] = {}
    leaked = bylines = content = 0
    boilerplate_words: list[int] = []
    for page, text in zip(pages, texts):
        if page.kind == "boilerplate":
            boilerplate_words.append(len(WORD.findall(text)))
            continue
        scores.setdefault(page.kind, []).append(token_scores(text, page.main_text))
        if page.kind in CONTENT_KINDS:
            content += 1
            leaked += any(p in text for p in page.boilerplate if len(p.split()) >= LEAK_MIN_WORDS)
            bylines += page.byline in text
    main = [score for kind in CONTENT_KINDS for score in scores.get(kind, [])]

    def mean(values: Sequence[float]) -> float:
        return statistics.fmean(values) if values else 0.0

    return {
        "precision": mean([s[0] for s in main]),
        "recall": mean([s[1] for s in main]),
        "f1": mean([s[2] for s in main]),
        "f1_by_kind": {kind: mean([s[2] for s in values]) for kind, values in sorted(scores.items())},
        "leak_share": leaked / content if content else 0.0,
        "byline_share": bylines / content if content else 0.0,
        "boilerplate_page_words": mean(boilerplate_words),
    }


# -- WARC readers ---------------------------------------------------------------------------


def _fastwarc(path: Path) -> int:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    with open(path, "rb") as stream:
        return sum(len(r.reader.read()) >= 0 for r in ArchiveIterator(stream, record_types=WarcRecordType.response))


def _warcio(path: Path) -> int:
    from warcio.archiveiterator import ArchiveIterator

    with open(path, "rb") as stream:
        return sum(len(r.content_stream().read()) >= 0 for r in ArchiveIterator(stream) if r.rec_type == "response")


def _one_core() -> set[int]:
    """Pin this process to one core; returns the cores it had, to restore."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    return allowed


def time_readers(files: Sequence[Path], repeat: int) -> dict[str, dict[str, float]]:
    """Response records per CPU second of each reader over `files`, on one core (median)."""
    allowed = _one_core()
    try:
        figures = {}
        for name, read in (("fastwarc", _fastwarc), ("warcio", _warcio)):
            samples, records = [], 0
            for _ in range(repeat):
                cpu = time.process_time()
                records = sum(read(path) for path in files)
                samples.append(time.process_time() - cpu)
            figures[name] = {"records": records, "cpu_s": statistics.median(samples)}
            figures[name]["records_per_cpu_s"] = records / figures[name]["cpu_s"]
        return figures
    finally:
        os.sched_setaffinity(0, allowed)


# -- records to documents: this commit's read_warc against another's ---------------------------


def baseline_extract(rev: str) -> ModuleType:
    """rules/webdata/blocks/extract.py as it was at `rev`, loaded as a module of its own (it imports
    the rest of `rules` as it is now)."""
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(
        ["git", "show", f"{rev}:rules/webdata/blocks/extract.py"], cwd=root, check=True, capture_output=True, text=True
    ).stdout
    spec = importlib.util.spec_from_loader(f"extract_at_{rev}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # where its dataclasses look their module up
    exec(compile(source, f"{rev}:rules/webdata/blocks/extract.py", "exec"), module.__dict__)
    return module


def _chunked(body: bytes, size: int = 4096) -> bytes:
    chunks = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks) + b"0\r\n\r\n"


def first_record_copy(source: Path, target: Path) -> None:
    """A WARC file of the source's first record alone: what a child costs to start."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.warcwriter import WARCWriter

    with open(source, "rb") as stream, open(target, "wb") as out:
        WARCWriter(out, gzip=True).write_record(next(iter(ArchiveIterator(stream))))


def encoded_copy(source: Path, target: Path) -> None:
    """The WARC file with each response's body as most crawlers store it: gzipped
    (`Content-Encoding`) and chunked (`Transfer-Encoding`), as the server sent it. The cut
    last record is rewritten whole: one more document."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.warcwriter import WARCWriter

    with open(source, "rb") as stream, open(target, "wb") as out:
        writer = WARCWriter(out, gzip=True)
        for record in ArchiveIterator(stream):
            if record.rec_type == "response" and not (
                record.http_headers and record.http_headers.protocol.startswith("HTTP/")
            ):
                continue  # a block that is no HTTP response (warcio would rewrite it as one): no page either way
            if record.rec_type == "response":
                body = _chunked(gzip.compress(record.content_stream().read(), mtime=0))
                record.http_headers.add_header("Content-Encoding", "gzip")
                record.http_headers.add_header("Transfer-Encoding", "chunked")
                record = writer.create_warc_record(
                    record.rec_headers.get_header("WARC-Target-URI"),
                    "response",
                    payload=io.BytesIO(body),
                    http_headers=record.http_headers,
                    warc_headers=record.rec_headers,
                )
            writer.write_record(record)


def _documents_written(read_warc: Callable, files: Sequence[Path], work: Path) -> int:
    """What a unit did before the budget (the baseline's step), in this process: the files'
    documents through `read_warc`, each a JSON line into `work`/{split}.jsonl."""
    from rules.webdata.blocks.documents import Skips
    from rules.webdata.extract_text import held_out

    documents = 0
    with (
        open(work / "train.jsonl", "w", encoding="utf-8") as train,
        open(work / "validation.jsonl", "w", encoding="utf-8") as validation,
    ):
        for path in files:
            for document in read_warc(path, Skips()):
                split = validation if held_out(document.id, VALIDATION_FRACTION) else train
                split.write(json.dumps(document.to_json(), ensure_ascii=False) + "\n")
                documents += 1
    return documents


def _documents_budgeted(files: Sequence[Path], work: Path) -> int:
    """A build's path: each file as its unit extracts it (`extract_text.extract_into`: forked
    children that bound each record's time and write the documents), into `work`/unit-N/."""
    from rules.webdata.blocks.extract import ExtractConfig
    from rules.webdata.extract_text import extract_into

    documents = 0
    for number, path in enumerate(files):
        unit = work / f"unit-{number}"
        unit.mkdir()
        counts = extract_into(unit, path, "warc", path.name, ExtractConfig(), VALIDATION_FRACTION, lambda done: None)
        documents += sum(counts["documents"].values())
    return documents


def records_worker(kind: str, listing: Path, out: Path) -> None:
    """In a process of its own, as a step's unit is (the benchmark's own has run much else,
    which changes what its memory costs): the documents of the WARC files `listing` names
    to the lines of their splits, `budgeted` as a build does, or by the `read_warc` of
    `current` or of a git revision; the CPU seconds of this process and its children over
    the loop, and the digests of the lines."""
    from rules.common.corpus import SPLITS
    from rules.webdata.blocks import extract

    def cpu() -> float:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    files = [Path(line) for line in listing.read_text().splitlines()]
    work = out.parent / "lines"
    work.mkdir()
    read_warc = extract.read_warc if kind in ("budgeted", "current") else baseline_extract(kind).read_warc
    start = cpu()
    documents = _documents_budgeted(files, work) if kind == "budgeted" else _documents_written(read_warc, files, work)
    seconds = cpu() - start
    units = sorted(work.glob("unit-*"), key=lambda unit: int(unit.name.partition("-")[2])) or [work]
    digests = {
        split: hashlib.sha256(b"".join((unit / f"{split}.jsonl").read_bytes() for unit in units)).hexdigest()
        for split in SPLITS
    }
    out.write_text(json.dumps({"documents": documents, "cpu_s": seconds, "sha256": digests}))


def _records_run(kind: str, files: Sequence[Path], work: Path) -> dict:
    """`records_worker` in a process of its own."""
    run = work / "records-run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    listing, out = run / "files.txt", run / "figures.json"
    listing.write_text("".join(f"{path}\n" for path in files))
    subprocess.run([sys.executable, __file__, "--worker", RECORDS_WORKER + kind, str(listing), str(out)], check=True)
    return json.loads(out.read_text())


def time_record_reading(files: Sequence[Path], work: Path, repeat: int, rev: str | None) -> dict[str, dict[str, float]]:
    """Documents per CPU second from records to the lines of their splits, each run in a
    process of its own on one core (median of `repeat`): this commit's read_warc (and
    `rev`'s), the same over gzipped and chunked bodies, and as a build runs it (the
    budgeted path, checked to write the same lines), in an order that reverses from one
    run to the next; and the CPU a file of one record costs that path."""
    encoded = []
    for path in files:
        encoded.append(work / f"encoded-{path.name}")
        encoded_copy(path, encoded[-1])
    first_record_copy(files[0], work / "first-record.warc.gz")
    kinds = {"current, in process": ("current", files)}
    if rev is not None:
        kinds["baseline"] = (rev, files)
    kinds["current, gzip and chunked bodies"] = ("current", encoded)
    kinds[BUDGETED] = ("budgeted", files)
    kinds[ONE_RECORD] = ("budgeted", [work / "first-record.warc.gz"])
    allowed = _one_core()
    try:
        samples: dict[str, list[dict]] = {name: [] for name in kinds}
        for attempt in range(repeat):
            for name in list(kinds) if attempt % 2 else reversed(kinds):  # a drifting load falls on each alike
                benchlib.log(f"records to documents, {name}: run {attempt + 1} of {repeat}")
                samples[name].append(_records_run(*kinds[name], work))
    finally:
        os.sched_setaffinity(0, allowed)
    if samples[BUDGETED][-1]["sha256"] != samples["current, in process"][-1]["sha256"]:
        raise SystemExit("the budgeted path wrote other lines than the same code in process")
    figures = {}
    for name, runs_of in samples.items():
        cpu = statistics.median(run["cpu_s"] for run in runs_of)
        documents = runs_of[0]["documents"]
        figures[name] = {"documents": documents, "cpu_s": cpu, "documents_per_cpu_s": documents / cpu}
    figures[ONE_RECORD]["files"] = 1
    return figures


# -- the run --------------------------------------------------------------------------------


def run_worker(python: Path | str, name: str, pages: Path, out: Path) -> dict:
    subprocess.run([python, __file__, "--worker", name, str(pages), str(out)], check=True)
    return json.loads(out.read_text())


def content_pages(corpus: RawCorpus) -> Iterator[Page]:
    """The pages an extractor gets: every HTML response but the malformed ones."""
    return (page for page in corpus.pages() if page.kind != "malformed")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        name, records = args.worker[0], RECORDS_WORKER
        run = records_worker if name.startswith(records) else worker
        run(name.removeprefix(records), Path(args.worker[1]), Path(args.worker[2]))
        return 0
    from rules.webdata.blocks.raw_corpus.pages import RawCorpus, RawCorpusSpec
    from rules.webdata.blocks.raw_corpus.warc import WARC_DIRECTORY, write_raw_corpus

    load_before = benchlib.load_average()
    spec = RawCorpusSpec(seed=args.seed, pages=args.pages, stdlib_modules=args.stdlib_modules)
    corpus = RawCorpus(spec)
    peers = {} if args.skip_trafilatura else {"trafilatura": benchlib.peer_python("trafilatura", PEER_PACKAGES)}
    extractors = {"resiliparse": sys.executable, **{name: python for name, python in peers.items() if python}}
    with tempfile.TemporaryDirectory(prefix="marinbuild-bench-extract-") as tmp:
        work = Path(tmp)
        benchlib.log(f"generating {args.pages} pages")
        written = write_raw_corpus(spec, work / "raw", corpus)
        pages = list(content_pages(corpus))
        with open(work / "pages.jsonl", "w") as out:
            out.writelines(json.dumps({"html": page.payload.decode()}) + "\n" for page in pages)
        results: dict[str, dict] = {}
        for name, python in extractors.items():
            runs = []
            for attempt in range(args.repeat):
                benchlib.log(f"{name}: run {attempt + 1} of {args.repeat}")
                runs.append(run_worker(python, name, work / "pages.jsonl", work / f"{name}.json"))
            cpu = statistics.median(run["cpu_s"] for run in runs)
            wall = statistics.median(run["wall_s"] for run in runs)
            results[name] = {
                "pages_per_cpu_s": len(pages) / cpu,
                "pages_per_wall_s": len(pages) / wall,
                "cpu_s": cpu,
                **quality(pages, runs[0]["texts"]),
            }
        warc_files = sorted((work / "raw" / WARC_DIRECTORY).iterdir())
        readers = time_readers(warc_files, args.repeat)
        records = time_record_reading(warc_files, work, args.repeat, args.baseline_rev)
    ratios = {"fastwarc_to_warcio_records_per_cpu_s": readers["fastwarc"]["records_per_cpu_s"]
              / readers["warcio"]["records_per_cpu_s"]}  # fmt: skip
    per_second = {name: figures["documents_per_cpu_s"] for name, figures in records.items()}
    if "baseline" in records:
        for name in ("current, in process", BUDGETED):
            ratios[f"{name}_to_baseline_documents_per_cpu_s"] = per_second[name] / per_second["baseline"]
    for name in ("current, gzip and chunked bodies", BUDGETED):
        ratios[f"{name}_to_current_in_process_documents_per_cpu_s"] = (
            per_second[name] / per_second["current, in process"]
        )
    if "trafilatura" in results:
        resiliparse, trafilatura = results["resiliparse"], results["trafilatura"]
        ratios["resiliparse_to_trafilatura_pages_per_cpu_s"] = (
            resiliparse["pages_per_cpu_s"] / trafilatura["pages_per_cpu_s"]
        )
        ratios["resiliparse_to_trafilatura_f1"] = resiliparse["f1"] / trafilatura["f1"]
    report = {
        "pages": len(pages),
        "warc_bytes": written.bytes,
        "kinds": written.kinds,
        "extractors": results,
        "warc_readers": readers,
        "records_to_documents": records,
        "baseline_rev": args.baseline_rev,
        "ratios": ratios,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": benchlib.load_average(),
        },
    }
    print(json.dumps({"extractors": {n: {k: v for k, v in r.items() if k != "f1_by_kind"} for n, r in results.items()},
                      "warc_readers": readers, "records_to_documents": records, "ratios": ratios,
                      "machine": report["machine"]}, indent=2))  # fmt: skip
    if args.json_out:
        benchlib.write_json(args.json_out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
