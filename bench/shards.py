"""Steps of 100,000 shards: what a sharded step costs the builder, per shard.

A workspace of two targets: `//p:shards`, one step writing `--shards` tiny JSONL files
(one document each), and `//p:counted`, a sharded step (docs/rules.md#sharded-steps) with
a unit per file, each writing a small `counts.json` that the driver sums into its
summary. The units are made once, untimed, by a build in a process of its own (so that
this one stays small: a child's peak memory starts at its parent's size), each unit's
function called in a thread of the builder instead of a worker process of its own, and
what it writes not fsynced (the engine's lookup, lease, attempt record and publish per
unit as in any build; 100,000 worker processes would take an hour on two cores, and
neither their start nor the disk's flushes are what is measured here). Then:

1. **plan**: the step runs again with every unit found (an attribute of the step no
   unit reads changed, as after a build killed half-way or a change to the driver): the
   driver lists its units, computes each key from its input's manifest, looks them all up
   and assembles their results. `marinbuild build` in a process of its own: wall and CPU
   seconds, and its peak resident memory; the same at a tenth of the shards gives the
   driver's **memory per shard** (the difference of the two peaks over the difference
   of the shard counts).
2. **no-op**: `marinbuild build //p:counted` with everything built (median of
   `--repeat`), and `--dry-run`'s plan of it.
3. **first unit's start**: a parameter every unit reads changes (every unit's key with
   it), and `marinbuild build` starts: the seconds from the command's start to the first
   unit's function starting (it writes the time to a file), after which the build is
   interrupted.
4. **bucket**: the same workspace at `--bucket-shards` (two sizes) on a `gs://` store of
   fake-gcs-server behind a proxy adding `--delay-ms` to every request (bench/store.py's),
   made the same way: the no-op's wall time and its GCS requests (counted in process at
   gcsfs's HTTP boundary), per shard; two sizes tell whether the requests grow with the
   shards.

Usage: ``python bench/shards.py [--shards N] [--bucket-shards N,M] [--delay-ms MS]
[--repeat R] [--skip-bucket] [--toy] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import benchlib

from marinbuild.actions.bookkeeping.results import NullReporter
from marinbuild.actions.execution import executor
from marinbuild.actions.execution.build_options import BuildOptions
from marinbuild.commands.build import build
from marinbuild.session import Session
from marinbuild.targets.context import Context

STEP = "//p:counted"
RULES = '''
"""The benchmark's rules: tiny shards, and a sharded step with a unit per shard."""

import json
import time

from marinbuild.targets import Attr, Resources, Rule, ShardUnit
from marinbuild.targets import attrs as types


def _make(ctx):
    out = ctx.out / "shards"
    out.mkdir()
    for index in range(ctx.attrs["count"]):
        (out / f"shard-{index:06d}.jsonl").write_text(json.dumps({"text": f"document {index}"}) + "\\n")


make_shards = Rule(name="make_shards", impl=_make, attrs={"count": Attr(types.INT)})


def count_shard(ctx):
    """One unit: the bytes of its shard. The first to start says when, for the benchmark."""
    first = ctx.workspace / "first-unit"
    if not first.exists():
        first.write_text(repr(time.time()))
    text = ctx.location("shard").read_bytes()
    (ctx.out / "counts.json").write_text(json.dumps({"bytes": len(text), "salt": ctx.attrs["salt"]}))


def _count(ctx):
    root = ctx.root(ctx.attrs["data"])
    salt = ctx.attrs["salt"]
    paths = ctx.files(ctx.attrs["data"])
    units = [ShardUnit(path.relative_to(root).as_posix(), {"shard": path}, {"salt": salt}) for path in paths]
    results = ctx.map_shards("shardbench:count_shard", units)
    total = sum(result.read_json("counts.json")["bytes"] for result in results)
    summary = {"bytes": total, "shards": len(results), "note": ctx.attrs["note"]}
    (ctx.out / "summary.json").write_text(json.dumps(summary))


count_bytes = Rule(
    name="count_bytes",
    impl=_count,
    attrs={
        "data": Attr(types.LABEL),
        "salt": Attr(types.STRING, default=""),  # every unit reads it
        "note": Attr(types.STRING, default=""),  # only the driver reads it
    },
    sharded=True,
    resources=Resources(cpu=4),
)
'''
BUILD = """
make_shards(name = "shards", count = {count})
count_bytes(name = "counted", data = ":shards", salt = "{salt}", note = "{note}")
"""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=100_000, help="default: %(default)s")
    parser.add_argument(
        "--bucket-shards", default="1000,4000", help="the two sizes timed on the bucket (default: %(default)s)"
    )
    parser.add_argument("--delay-ms", type=int, default=30, help="the proxy's delay per request (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="no-ops timed at each size (default: %(default)s)")
    parser.add_argument("--skip-bucket", action="store_true", help="only the local store")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="also time the plan and the first unit's start by the marinbuild of this checkout (its root, put "
        "on PYTHONPATH: e.g. `git archive HEAD marinbuild | tar -x -C DIR`): ratios in the same run",
    )
    parser.add_argument(
        "--toy", action="store_true", help="a few hundred shards and a small bucket: what the tests run"
    )
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    if args.toy:
        args.shards, args.bucket_shards, args.repeat = 300, "40,120", 1
    args.bucket_sizes = [int(size) for size in args.bucket_shards.split(",")]
    if args.shards < 10 or len(args.bucket_sizes) != 2:
        parser.error("--shards must be at least 10 and --bucket-shards two sizes")
    return args


def write_workspace(root: Path, shards: int, store: str | None = None) -> Path:
    root.mkdir(parents=True)
    config = 'rules = ["shardbench"]\n' + (f'store = "{store}"\n' if store else "")
    (root / "marinbuild.toml").write_text(config)
    (root / "shardbench.py").write_text(textwrap.dedent(RULES).lstrip())
    (root / "p").mkdir()
    set_build(root, shards)
    return root


def set_build(root: Path, shards: int, salt: str = "", note: str = "") -> None:
    (root / "p" / "BUILD.marin").write_text(BUILD.format(count=shards, salt=salt, note=note))


def _unit_in_thread(self: executor.Executor, target: Any, impl: str, context: Context, *inputs: Any) -> None:
    """A unit's function called here, in the builder's thread (the setup only): what the
    executor would run in a worker process, given the same context."""
    module, function = impl.split(":")
    getattr(importlib.import_module(module), function)(context)


@contextlib.contextmanager
def units_in_threads(workspace: Path) -> Iterator[None]:
    """The setup's build: units in threads, and no `fsync` of what it writes (an entry
    is fsynced before it is linked in place: on a disk other work keeps busy, 100,000
    of them take hours, and what survives a crash is not measured here)."""
    original, fsync = executor.LocalExecutor.run_unit, os.fsync
    executor.LocalExecutor.run_unit = _unit_in_thread  # type: ignore[method-assign]
    os.fsync = lambda fd: None
    sys.path.insert(0, str(workspace))
    try:
        yield
    finally:
        executor.LocalExecutor.run_unit, os.fsync = original, fsync  # type: ignore[method-assign]
        sys.path.remove(str(workspace))
        sys.modules.pop("shardbench", None)


def make_units(workspace: Path, store: str | None = None) -> float:
    """Build the step once, its units in threads here: seconds."""
    started = time.perf_counter()
    with units_in_threads(workspace):
        result = build(Session.open(workspace, store), [STEP], BuildOptions(jobs=2), NullReporter())
    if result.counts.get("failed") or result.counts.get("skipped"):
        raise benchlib.BenchError(f"the setup build failed: {result.counts}")
    return time.perf_counter() - started


def make_units_apart(workspace: Path) -> float:
    """`make_units` in a process of its own: this one stays small, so the peak memory of
    each command it starts is that command's own (a child's `ru_maxrss` starts at its
    parent's resident size when it was started)."""
    code = "import shards, sys; from pathlib import Path; print(shards.make_units(Path(sys.argv[1])))"
    done = subprocess.run(
        [sys.executable, "-c", code, str(workspace)], cwd=Path(__file__).parent, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise benchlib.BenchError(f"the setup failed:\n{done.stderr[-benchlib.ERROR_TAIL_CHARS :]}")
    return float(done.stdout.splitlines()[-1])


def cli(workspace: Path, *args: str) -> list[str]:
    """`marinbuild build` by this interpreter (`-m`: the checkout on PYTHONPATH where one is given)."""
    return [sys.executable, "-m", "marinbuild", "--workspace", str(workspace), "build", "--json", "--jobs", "2", *args]


def source_env(source: Path | None) -> dict[str, str]:
    """The environment that runs the marinbuild of `source` (a checkout's root), or this one."""
    return {} if source is None else {"PYTHONPATH": str(source)}


def timed_build(workspace: Path, *args: str, built: int, source: Path | None = None) -> benchlib.Run:
    run = benchlib.run_timed(cli(workspace, *args, STEP), workspace, source_env(source))
    counts = benchlib.parse_trailing_json(run.stdout)["counts"]
    if counts.get("built", 0) != built or counts.get("failed"):
        raise benchlib.BenchError(f"expected {built} built, got {counts}")
    return run


def plan(workspace: Path, shards: int, note: str, source: Path | None = None) -> benchlib.Run:
    """The step again, every unit found (only the driver's attribute changed)."""
    set_build(workspace, shards, note=note)
    return timed_build(workspace, built=1, source=source)


def first_unit_start(workspace: Path, shards: int, salt: str, source: Path | None = None) -> float:
    """Seconds from `marinbuild build` starting to its first unit starting, every unit's
    key changed (`salt`); the build is interrupted then."""
    set_build(workspace, shards, salt=salt)
    marker = workspace / "first-unit"
    marker.unlink(missing_ok=True)
    env = {**os.environ, **source_env(source)}
    started = time.time()
    process = subprocess.Popen(
        cli(workspace, STEP), cwd=workspace, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        while not marker.exists() or not marker.read_text():
            if process.poll() is not None:
                raise benchlib.BenchError(f"the build ended before a unit started: {process.stderr.read()[-2000:]!r}")
            time.sleep(0.01)
        return float(marker.read_text()) - started
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=300)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def compared(
    name: str, measure: Callable[[Path | None, int], float], args: argparse.Namespace
) -> dict[str, float | list[float]]:
    """`measure(source, round)` for this marinbuild and, with `--baseline-src`, that one's,
    who goes first alternating each round: the medians and their ratio."""
    sources = {"this": None, **({"baseline": args.baseline_src} if args.baseline_src else {})}
    times: dict[str, list[float]] = {who: [] for who in sources}
    for round_ in range(args.repeat):
        for who in list(sources) if round_ % 2 == 0 else list(reversed(sources)):
            benchlib.log(f"{name}: {who}")
            times[who].append(measure(sources[who], round_))
    figures: dict[str, float | list[float]] = {f"{who}_s": statistics.median(times[who]) for who in sources}
    figures.update({f"{who}_rounds": times[who] for who in sources})
    if args.baseline_src:
        figures["to_baseline"] = statistics.median(times["this"]) / statistics.median(times["baseline"])
    return figures


def local_figures(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    sizes = {"large": args.shards, "small": max(args.shards // 10, 1)}
    figures: dict[str, Any] = {}
    for name, shards in sizes.items():
        workspace = write_workspace(root / name, shards)
        benchlib.log(f"{shards} shards: making the units (in threads of this process)")
        setup_s = make_units_apart(workspace)
        benchlib.log(f"{shards} shards: the plan (every unit found)")
        planned = plan(workspace, shards, note="again")
        figures[name] = {
            "shards": shards,
            "setup_s": setup_s,
            "plan_s": planned.seconds,
            "plan_cpu_s": planned.cpu_s,
            "plan_peak_rss_mib": planned.peak_rss_mib,
        }
        if name == "large":
            benchlib.log(f"{shards} shards: no-ops")
            noops = [timed_build(workspace, built=0) for _ in range(args.repeat)]
            dry = timed_build(workspace, "--dry-run", built=0)
            figures[name].update(
                noop_s=statistics.median(run.seconds for run in noops),
                noop_cpu_s=statistics.median(run.cpu_s for run in noops),
                noop_peak_rss_mib=max(run.peak_rss_mib for run in noops),
                dry_run_s=dry.seconds,
                plan_compared=compared(
                    "the plan", lambda source, n: plan(workspace, shards, f"round {n} {source}", source).seconds, args
                ),
                first_unit_compared=compared(
                    "the first unit's start",
                    lambda source, n: first_unit_start(workspace, shards, f"round {n} {source}", source),
                    args,
                ),
            )
    large, small = figures["large"], figures["small"]
    grown = large["shards"] - small["shards"]
    per_shard = {
        "driver_bytes_per_shard": (large["plan_peak_rss_mib"] - small["plan_peak_rss_mib"]) * 2**20 / grown,
        "plan_ms_per_shard": 1000 * large["plan_s"] / large["shards"],
        "plan_cpu_ms_per_shard": 1000 * large["plan_cpu_s"] / large["shards"],
        "setup_ms_per_unit": 1000 * large["setup_s"] / large["shards"],
        "plan_large_to_small": large["plan_s"] / small["plan_s"],
        "noop_us_per_shard": 1e6 * large["noop_s"] / large["shards"],
    }
    return {**figures, "per_shard": per_shard}


def counted(counter: Any, function: Callable[[], Any]) -> tuple[float, int]:
    """Seconds and GCS requests of `function`, run in this process."""
    before = counter.count
    started = time.perf_counter()
    function()
    return time.perf_counter() - started, counter.count - before


def bucket_figures(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    from store import EMULATOR, LatencyProxy, RequestCounter, start_server

    server = start_server()
    try:
        import gcsfs

        counter = RequestCounter()
        gcsfs.GCSFileSystem(token="anon").mkdir("bench")
        proxy = LatencyProxy(server.url, args.delay_ms / 1000)
        figures: dict[str, Any] = {}
        try:
            for shards in args.bucket_sizes:
                store = f"gs://bench/shards-{shards}"
                workspace = write_workspace(root / f"bucket-{shards}", shards, store)
                os.environ[EMULATOR] = server.url
                benchlib.log(f"{shards} shards on the bucket: making the units")
                setup_s = make_units(workspace, store)
                os.environ[EMULATOR] = proxy.url  # for this process's builds and the commands it starts

                def in_process(*, built: int) -> None:
                    result = build(Session.open(workspace, store), [STEP], BuildOptions(jobs=2), NullReporter())
                    if result.counts.get("built", 0) != built or result.counts.get("failed"):
                        raise benchlib.BenchError(f"expected {built} built, got {result.counts}")

                benchlib.log(f"{shards} shards on the bucket: no-ops, the plan, the first unit's start")
                noops = [timed_build(workspace, built=0) for _ in range(args.repeat)]
                noop_s, noop_requests = counted(counter, lambda: in_process(built=0))
                set_build(workspace, shards, note="again")
                plan_s, plan_requests = counted(counter, lambda: in_process(built=1))
                figures[str(shards)] = {
                    "shards": shards,
                    "setup_s": setup_s,
                    "noop_s": statistics.median(run.seconds for run in noops),
                    "noop_in_process_s": noop_s,
                    "requests": noop_requests,
                    "requests_per_shard": noop_requests / shards,
                    "plan_s": plan_s,
                    "plan_requests_per_shard": plan_requests / shards,
                    "first_unit_compared": compared(
                        f"the first unit's start on the bucket ({shards} shards)",
                        lambda source, n: first_unit_start(workspace, shards, f"round {n} {source}", source),
                        args,
                    ),
                }
        finally:
            proxy.close()
    finally:
        server.stop()
    small, large = (figures[str(size)] for size in args.bucket_sizes)
    return {
        "delay_ms": args.delay_ms,
        **figures,
        "requests_growth": (large["requests"] - small["requests"]) / (large["shards"] - small["shards"]),
    }


def _compared_line(figures: dict[str, Any]) -> str:
    baseline = (
        f" (the baseline {figures['baseline_s']:.2f} s: {figures['to_baseline']:.2f} x)"
        if "to_baseline" in figures
        else ""
    )
    return f"{figures['this_s']:.2f} s{baseline}"


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    report: dict[str, Any] = {"host": benchlib.host_info(), "load_before": benchlib.load_average()}
    with tempfile.TemporaryDirectory(prefix="marinbuild-bench-shards-") as temporary:
        root = Path(temporary)
        report["local"] = local_figures(root / "local", args)
        if not args.skip_bucket:
            report["bucket"] = bucket_figures(root / "bucket", args)
        report["load_after"] = benchlib.load_average()
        _print(report, args)  # before the temporary directory's removal (minutes at 100,000 units)


def _print(report: dict[str, Any], args: argparse.Namespace) -> None:
    local = report["local"]
    large, per = local["large"], local["per_shard"]
    print(f"sharded step of {large['shards']} shards, local store:")
    print(
        f"  plan (every unit found): {large['plan_s']:.2f} s ({large['plan_cpu_s']:.2f} s CPU), "
        f"{per['plan_ms_per_shard']:.3f} ms per shard; {per['plan_large_to_small']:.2f} x the plan at a tenth"
    )
    print(f"  no-op: {large['noop_s']:.2f} s ({large['noop_cpu_s']:.2f} s CPU); --dry-run {large['dry_run_s']:.2f} s")
    for what, figures in (("plan", large["plan_compared"]), ("first unit's start", large["first_unit_compared"])):
        print(f"  {what}: {_compared_line(figures)}")
    peak = large["plan_peak_rss_mib"]
    print(f"  driver memory: {per['driver_bytes_per_shard']:.0f} bytes per shard (the plan's peak {peak:.0f} MiB)")
    if "bucket" in report:
        bucket = report["bucket"]
        for size in args.bucket_sizes:
            figures = bucket[str(size)]
            print(
                f"  bucket behind {bucket['delay_ms']} ms, {size} shards: no-op {figures['noop_s']:.2f} s, "
                f"{figures['requests']} requests ({figures['requests_per_shard']:.4f} per shard); plan "
                f"{figures['plan_s']:.2f} s, {figures['plan_requests_per_shard']:.2f} requests per shard; "
                f"first unit's start: {_compared_line(figures['first_unit_compared'])}"
            )
        print(f"  no-op requests per added shard: {bucket['requests_growth']:.4f}")
    if args.json_out:
        benchlib.write_json(args.json_out, report)


if __name__ == "__main__":
    main()
