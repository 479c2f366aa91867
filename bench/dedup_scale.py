"""Deduplication at scale: dedup's reduce in units (rules/webdata/blocks/dedup/partitioned.py)
as Ray tasks on a local Ray cluster, over synthetic signatures of 2 million to 20 million
documents: each process's peak memory, the time, and the bytes each wave writes for the
next (the shuffle), per document, at each size.

Method: the signatures are generated, not computed from text (400 bytes a document: the
default 25 bands of 4 rows, in shards of `--shard-documents`): random signatures and
content hashes, 5% of each shard exact copies and 10% near copies (5 of the 25 bands
changed) of documents of its own or of the shard before it, so duplicates cross shards.
The waves run exactly as the `dedup` step runs them (`PartitionedReduce`, the same unit
functions), each unit as a Ray task (`ray.remote`, one CPU each) instead of through
`ctx.map_shards`, so what is measured is the reduce, not the engine's per-unit
bookkeeping (docs/benchmarks.md "Per-action overhead" measures that). Ray reuses its
worker processes: a worker's peak resident memory (`ru_maxrss`, reported by each task)
is the peak over every unit it ran. The driver's own peak is reported apart. The same
run also measures the one-process reduce (`find_clusters`) at the smallest size, in a
process of its own, as the baseline.

Usage: ``python bench/dedup_scale.py [--documents 2000000 20000000] [--unit-documents N]
[--shard-documents N] [--workdir DIR] [--toy] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
from dedup import synthetic_maps  # noqa: E402 - the signatures of bench/dedup.py, copied across shards


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, nargs="+", default=[2_000_000, 20_000_000])
    parser.add_argument("--unit-documents", type=int, default=500_000, help="dedup's reduce_documents")
    parser.add_argument("--shard-documents", type=int, default=100_000)
    parser.add_argument("--cpus", type=int, default=2, help="of the local Ray cluster")
    parser.add_argument("--toy", action="store_true", help="tiny sizes, for the tests: 20,000 and 60,000 documents")
    parser.add_argument("--workdir", type=Path, default=None, help="kept if given (default: a temporary one)")
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.toy:
        args.documents, args.unit_documents, args.shard_documents = [20_000, 60_000], 10_000, 5_000
    return args


def _task(wave: str, files: dict[str, str], attrs: dict, out: str) -> dict:
    """One unit, in a Ray worker: its wave's function, then this process's peak so far."""
    from rules.webdata.blocks.dedup.partitioned import WAVES

    started = time.process_time()
    Path(out).mkdir(parents=True)
    WAVES[wave]({role: Path(path) for role, path in files.items()}, attrs, Path(out))
    written = sum(path.stat().st_size for path in Path(out).iterdir())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"pid": os.getpid(), "peak": peak, "cpu_s": time.process_time() - started, "written": written}


def reduce_on_ray(maps: list[Path], unit_documents: int, work: Path) -> dict:
    import ray

    from marinbuild.targets.shards import ShardResult
    from rules.webdata.blocks.dedup.config import DedupConfig
    from rules.webdata.blocks.dedup.partitioned import PartitionedReduce

    remote = ray.remote(num_cpus=1)(_task)
    waves: dict[str, dict[str, float]] = {}
    peaks: dict[int, int] = {}
    count = [0]

    def run_wave(wave: str, units):  # noqa: ANN001, ANN202 - PartitionedReduce's RunWave
        outs = []
        for _ in units:
            count[0] += 1
            outs.append(work / "units" / f"{count[0]:07d}")
        started = time.monotonic()
        reports = ray.get(
            [
                remote.remote(wave, {r: str(p) for r, p in unit.files.items()}, dict(unit.attrs), str(out))
                for unit, out in zip(units, outs)
            ]
        )
        seen = waves.setdefault(wave, {"units": 0, "seconds": 0.0, "cpu_s": 0.0, "written": 0, "peak": 0})
        seen["units"] += len(units)
        seen["seconds"] += time.monotonic() - started
        for report in reports:
            seen["cpu_s"] += report["cpu_s"]
            seen["written"] += report["written"]
            seen["peak"] = max(seen["peak"], report["peak"])
            peaks[report["pid"]] = max(peaks.get(report["pid"], 0), report["peak"])
        return [
            ShardResult(unit.name, str(out), out, tuple(sorted(p.name for p in out.iterdir())), True)
            for unit, out in zip(units, outs)
        ]

    started = time.monotonic()
    found = PartitionedReduce(maps, DedupConfig(), unit_documents, run_wave).run(work / "decisions")
    seconds = time.monotonic() - started
    return {
        "seconds": seconds,
        "worker_peak_bytes": max(peaks.values()),
        "workers": len(peaks),
        "driver_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "shuffled_bytes": sum(wave["written"] for wave in waves.values()),
        "cpu_s": sum(wave["cpu_s"] for wave in waves.values()),
        "waves": waves,
        "counts": found.counts.to_json(),
    }


_ONE_PROCESS = """
import json, resource, sys, time
from pathlib import Path
from rules.webdata.blocks.dedup.clusters import find_clusters
from rules.webdata.blocks.dedup.config import DedupConfig
maps = [Path(line) for line in Path(sys.argv[1]).read_text().splitlines()]
started = time.monotonic()
found = find_clusters(maps, DedupConfig(), Path(sys.argv[2]))
print(json.dumps({"seconds": time.monotonic() - started,
                  "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "counts": found.counts.to_json()}))
"""


def one_process(maps: list[Path], work: Path) -> dict:
    work.mkdir(parents=True)
    listing = work / "maps.txt"
    listing.write_text("\n".join(str(path) for path in maps))
    done = subprocess.run(
        [sys.executable, "-c", _ONE_PROCESS, str(listing), str(work / "whole")],
        capture_output=True,
        text=True,
        check=True,
    )
    return benchlib.parse_trailing_json(done.stdout)


def main(argv: Sequence[str] | None = None) -> int:
    import ray

    args = parse_args(argv)
    results: dict[str, object] = {"host": benchlib.host_info(), "load_before": benchlib.load_average()}
    sizes: dict[int, dict] = {}
    with benchlib.work_dir(args.workdir) as work:
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
        try:
            for documents in args.documents:
                benchlib.log(f"writing the signatures of {documents:,} synthetic documents")
                maps = synthetic_maps(work / f"maps-{documents}", documents, args.shard_documents, across_shards=True)
                benchlib.log(f"reducing {documents:,} documents in units of {args.unit_documents:,} on Ray")
                sizes[documents] = reduce_on_ray(maps, args.unit_documents, work / f"reduce-{documents}")
                if documents == min(args.documents):
                    sizes[documents]["one_process"] = one_process(maps, work / f"whole-{documents}")
                    same = sizes[documents]["one_process"]["counts"] == sizes[documents]["counts"]
                    sizes[documents]["same_counts_as_one_process"] = same
        finally:
            ray.shutdown()
    small, large = sizes[min(sizes)], sizes[max(sizes)]
    growth = max(sizes) / min(sizes)
    results.update(
        {
            "sizes": {str(documents): found for documents, found in sizes.items()},
            "worker_peak_ratio": large["worker_peak_bytes"] / small["worker_peak_bytes"],
            "seconds_per_document_ratio": (large["seconds"] / max(sizes)) / (small["seconds"] / min(sizes)),
            "cpu_per_document_ratio": (large["cpu_s"] / max(sizes)) / (small["cpu_s"] / min(sizes)),
            "shuffled_bytes_per_document": {str(d): found["shuffled_bytes"] / d for d, found in sizes.items()},
            "documents_ratio": growth,
            "load_after": benchlib.load_average(),
        }
    )
    rows = [
        [
            f"{documents:,}",
            f"{found['seconds']:.1f}",
            f"{found['seconds'] / documents * 1e6:.1f}",
            f"{found['cpu_s'] / documents * 1e6:.1f}",
            f"{found['worker_peak_bytes'] / 2**20:.0f}",
            f"{found['driver_peak_bytes'] / 2**20:.0f}",
            f"{found['shuffled_bytes'] / documents:.0f}",
            found["counts"]["rounds"],
        ]
        for documents, found in sizes.items()
    ]
    heads = [
        "documents",
        "seconds",
        "us/doc",
        "unit CPU us/doc",
        "worker peak MiB",
        "driver peak MiB",
        "bytes shuffled/doc",
        "rounds",
    ]
    benchlib.print_table(heads, rows)
    print(
        f"worker peak {max(sizes):,} / {min(sizes):,}: {results['worker_peak_ratio']:.2f}x; "
        f"seconds per document: {results['seconds_per_document_ratio']:.2f}x; "
        f"units' CPU seconds per document: {results['cpu_per_document_ratio']:.2f}x"
    )
    if args.json_out:
        benchlib.write_json(args.json_out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
