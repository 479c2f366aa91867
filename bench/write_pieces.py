"""How the size of each write to the file changes what a large download costs.

The GCS store receives a large object into a 1 MiB buffer and writes the file from it
`_WRITE_BYTES` at a time (`marinbuild/store/large_download.py`). This downloads one object
of `--size-mib` MiB (default 1 GiB) from fake-gcs-server by the store's own path, checked
against its size and BLAKE3 as a build does, once per write size of `--write-kib`
(default 64 to 1024 KiB), and with gcsfs's `get_file` (which writes 128 KiB at a time) in
every round as the baseline. The rounds take turns as `bench/store.py`'s transfers do:
who goes first alternates, and each download starts after a `sync` and right after as
many bytes as it will write were written and deleted. With `--pause S` it starts S
seconds after that instead: on a VM that hands memory freed for a couple of seconds back
to its host, the download then fills memory the host must supply again.

Reported per write size: the median wall time, this process's CPU time (user + system)
and the server's, and gcsfs's time over it (1: as fast).

Usage: ``python bench/write_pieces.py [--size-mib M] [--write-kib K,...] [--repeat R]
[--pause S] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import benchlib
import store as store_bench

from marinbuild.store import large_download
from marinbuild.store.manifest import hash_tree


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="default: %(default)s")
    parser.add_argument("--write-kib", default="64,128,256,512,1024", help="write sizes (default: %(default)s)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=6,
        help="rounds; who goes first alternates, so an even number weighs both orders alike (default: %(default)s)",
    )
    parser.add_argument(
        "--pause",
        type=float,
        default=0.0,
        help="seconds between freeing memory and each download (default: %(default)s)",
    )
    parser.add_argument("--json-out", type=Path)
    return parser.parse_args(argv)


def measure(root: Path, args: argparse.Namespace, server_pid: int) -> dict[str, list[float]]:
    import gcsfs

    staged = root / "staged"
    staged.mkdir()
    benchlib.log(f"writing and uploading a {args.size_mib} MiB object")
    store_bench.write_random(staged / "model.bin", args.size_mib)
    manifest = hash_tree(staged)
    store = store_bench.bucket_store(root, "bench", "pieces")
    store.put_dir(staged, "out", manifest)
    size = manifest.total_bytes
    # The store's own path for large objects, whatever the size asked for.
    large_download.OWN_CONNECTION_BYTES = min(large_download.OWN_CONNECTION_BYTES, size)
    fs = gcsfs.GCSFileSystem(token="anon", skip_instance_cache=True)
    local = root / "downloaded"

    def ours(write_bytes: int) -> None:
        large_download._WRITE_BYTES = write_bytes
        digests = store.get_files({"out/model.bin": local}, size, {"out/model.bin": size})
        assert digests[local] == manifest.files[0].digest, "the download does not match what was uploaded"

    steps: dict[str, Callable[[], Any]] = {"gcsfs": lambda: fs.get_file("bench/pieces/out/model.bin", str(local))}
    for kib in (int(kib) for kib in args.write_kib.split(",")):
        steps[f"{kib}_kib"] = functools.partial(ours, kib << 10)

    def before() -> None:
        store_bench.freed_memory(root / "scratch", size)
        time.sleep(args.pause)

    times: dict[str, list[float]] = {}
    for attempt in range(args.repeat):
        store_bench.take_turns(steps, attempt, times, server_pid, after=lambda: local.unlink(), before=before)
        benchlib.log(f"round {attempt + 1}/{args.repeat} done")
    return times


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    server = store_bench.start_server()
    try:
        import gcsfs

        gcsfs.GCSFileSystem(token="anon").mkdir("bench")
        with tempfile.TemporaryDirectory(prefix="marinbuild-bench-pieces-") as temporary:
            times = measure(Path(temporary), args, server._process.pid)
    finally:
        server.stop()
    medians = {name: statistics.median(values) for name, values in times.items()}
    kinds = [name for name in times if not name.endswith("cpu")]
    ratios = {kind: medians["gcsfs"] / medians[kind] for kind in kinds}
    print(f"{args.size_mib} MiB download, {args.pause:g} s after freeing memory (median of {args.repeat}):")
    for kind in kinds:
        print(
            f"  {kind:>9}: {medians[kind]:.2f} s, {ratios[kind]:.2f} x gcsfs (throughput); CPU "
            f"{medians[kind + '_cpu']:.2f} s here, {medians[kind + '_server_cpu']:.2f} s in the server"
        )
    if args.json_out:
        benchlib.write_json(
            args.json_out,
            {
                "mib": args.size_mib,
                "pause_s": args.pause,
                "seconds": medians,
                "rounds": times,
                "ratio_to_gcsfs": ratios,
            },
        )


if __name__ == "__main__":
    main()
