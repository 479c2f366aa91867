"""Main-text extraction: Resiliparse (marinbuild's) vs trafilatura, and FastWARC vs warcio.

Generates a raw web corpus (rules/webdata/raw_corpus.py: WARC files of pages rendered from
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
  every record's payload, on one core.

Resiliparse runs as marinbuild calls it (`rules.webdata.extract.main_text`); trafilatura
is the peer, installed only in the benchmarks' peer environment ($MARINBUILD_BENCH_PEERS_VENV,
default /work/bench-venv: `pip install trafilatura lxml_html_clean`), never a dependency
of marinbuild. It runs with its defaults but `include_comments=False`, since comments are
not main text here.

Usage: ``python bench/extract.py [--pages N] [--seed S] [--stdlib-modules M] [--repeat R]
[--skip-trafilatura] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import benchlib

if TYPE_CHECKING:  # imported where used: the peer's worker runs where marinbuild is not installed
    from rules.webdata.raw_corpus import Page, RawCorpus

CONTENT_KINDS = ("original", "exact_duplicate", "near_duplicate", "non_english")
WORD = re.compile(r"\w+")
LEAK_MIN_WORDS = 3  # shorter phrases ("Home", "Log in") also occur in main text
PEER_PACKAGES = "trafilatura lxml_html_clean"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    benchlib.add_raw_corpus_args(parser)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per extractor (default: %(default)s)")
    parser.add_argument("--skip-trafilatura", action="store_true", help="measure Resiliparse alone")
    parser.add_argument("--json-out", type=Path, help="also write results as JSON here")
    parser.add_argument("--worker", nargs=3, metavar=("EXTRACTOR", "PAGES", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pages < 2 or args.repeat < 1:
        parser.error("need --pages >= 2 and --repeat >= 1")
    return args


# -- the worker: one extractor in its own process, on one core -------------------------------


def _extractor(name: str) -> Callable[[str], str]:
    if name == "resiliparse":
        from rules.webdata.extract import main_text

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


def time_readers(files: Sequence[Path], repeat: int) -> dict[str, dict[str, float]]:
    """Response records per CPU second of each reader over `files`, on one core (median)."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
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
        worker(args.worker[0], Path(args.worker[1]), Path(args.worker[2]))
        return 0
    from rules.webdata.raw_corpus import WARC_DIRECTORY, RawCorpus, RawCorpusSpec, write_raw_corpus

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
        readers = time_readers(sorted((work / "raw" / WARC_DIRECTORY).iterdir()), args.repeat)
    ratios = {"fastwarc_to_warcio_records_per_cpu_s": readers["fastwarc"]["records_per_cpu_s"]
              / readers["warcio"]["records_per_cpu_s"]}  # fmt: skip
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
        "ratios": ratios,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": benchlib.load_average(),
        },
    }
    print(json.dumps({"extractors": {n: {k: v for k, v in r.items() if k != "f1_by_kind"} for n, r in results.items()},
                      "warc_readers": readers, "ratios": ratios, "machine": report["machine"]}, indent=2))  # fmt: skip
    if args.json_out:
        benchlib.write_json(args.json_out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
