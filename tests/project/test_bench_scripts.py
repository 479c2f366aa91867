"""The benchmark scripts of bench/ still run against the code they measure.

Each runs at a toy size, its peers (DVC, Snakemake) skipped, and writes its JSON; the
figures are not judged (speed is measured by running the benchmarks, docs/benchmarks.md),
only that every one of them was measured. A script that rots with an API it calls
would otherwise be found only when someone next needs its figures.

Every `python bench/SCRIPT.py ...` line shown in README.md and docs/ is parsed by that
script's own argument parser: its documented sizes take hours to run, but an option
renamed or dropped is found here.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import cli_env, require_tool

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# `python bench/noop.py --repeat 5 ...`, in a block or an inline span (up to its backtick).
DOC_LINE = re.compile(r"(?:^|[\s`])(?:\S*/)?python3? bench/(\w+)\.py((?: [^`\n]*)?)")
TOY = ["--targets", "60", "--packages", "12"]


def _run(script: str, tmp_path: Path, *args: str, timeout: float = 300) -> dict:
    out = tmp_path / "figures.json"
    # The scripts call `marinbuild` by name, as a user's shell would.
    env = {**cli_env(), "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args, "--json-out", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    # What a benchmark prints is its report: no exception logged on the way, even one it survived.
    assert "Traceback" not in done.stderr and "Task was destroyed" not in done.stderr, done.stderr[-3000:]
    return json.loads(out.read_text())


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and value > 0


@pytest.mark.parametrize(
    ("script", "args", "figures"),
    [
        (
            "noop.py",
            [
                *TOY,
                "--repeat",
                "1",
                "--skip-dvc",
                "--scale-targets",
                "120",
                "--scale-packages",
                "24",
                "--baseline-bin",
                "marinbuild",  # itself: the interleaved baseline's runs and ratios are made
            ],
            lambda data: [
                data["marinbuild"]["cold_s"],
                data["marinbuild"]["noop_s"]["median"],
                data["marinbuild"]["noop_no_bytecode_s"]["median"],
                data["marinbuild"]["peak_rss_mib"],
                data["marinbuild"]["baseline_noop_s"]["median"],
                data["marinbuild"]["baseline_noop_no_bytecode_s"]["median"],
                *data["marinbuild"]["vs_baseline"].values(),
                data["marinbuild_scale"]["noop_s"]["median"],
                *data["ratios"].values(),
            ],
        ),
        (
            "action_overhead.py",
            [*TOY, "--skip-dvc", "--skip-snakemake"],
            lambda data: [data["tools"]["marinbuild"]["cold_s"], data["tools"]["marinbuild"]["s_per_action"]],
        ),
        (
            "graph_scale.py",
            ["--small", "40", "--large", "80", "--per-package", "5", "--repeat", "1"],
            lambda data: [
                data["small"]["cold"]["actions_per_s"],
                data["large"]["first_noop"]["s"],
                data["large"]["uncertified_noop"]["peak_rss_mib"]["median"],
                data["large"]["certified_noop"]["cpu_s"]["median"],
                *data["ratios"].values(),
            ],
        ),
        (
            "query.py",
            [*TOY, "--repeat", "1"],
            lambda data: [
                value["warm"]["median"] for name, value in data.items() if name.startswith(("query", "baseline"))
            ],
        ),
    ],
)
def test_workspace_benchmarks_measure_at_a_toy_size(tmp_path, script, args, figures) -> None:
    measured = figures(_run(script, tmp_path, *args))
    assert measured and all(_positive(value) for value in measured), measured


def test_the_store_benchmark_measures_against_fake_gcs(tmp_path) -> None:
    args = ("--targets", "40", "--packages", "2", "--delays", "0,5", "--size-mib", "4", "--small-files", "50")
    data = _run("store.py", tmp_path, *args, "--repeat", "1", "--one-core", "--baseline-python", sys.executable)
    for name in ("direct", "proxy_0ms", "proxy_5ms"):
        noop = data["noop"][name]
        assert noop["requests"] > 0 and _positive(noop["noop_s"]), data["noop"]
        # The first no-op of a new machine (a new checkout, a new HOME), by this marinbuild and the baseline's.
        assert noop["fresh_requests"] > noop["requests"], noop  # it reads the entries the warm one remembers
        for figure in ("fresh_noop_s", "fresh_to_warm", "baseline_fresh_noop_s", "fresh_to_baseline"):
            assert _positive(noop[figure]), noop
    for name in ("large_output", "small_files"):
        for ratio in (
            "upload_ratio",
            "download_ratio",
            "download_again_ratio",
            "download_unchecked_again_ratio",
            "download_one_core_ratio",
            "download_unchecked_one_core_ratio",
        ):
            assert _positive(data[name][ratio]), data[name]
        # What each download cost the CPU, here and in the server (counted in 10 ms ticks).
        seconds = data[name]["seconds"]
        assert _positive(seconds["download_again_cpu"]) and seconds["download_again_server_cpu"] >= 0, seconds


def test_the_write_size_benchmark_downloads_by_the_stores_path_at_each_size(tmp_path) -> None:
    data = _run("write_pieces.py", tmp_path, "--size-mib", "4", "--write-kib", "64,1024", "--repeat", "1")
    assert set(data["ratio_to_gcsfs"]) == {"gcsfs", "64_kib", "1024_kib"}, data
    assert all(_positive(ratio) for ratio in data["ratio_to_gcsfs"].values()), data
    assert all(_positive(data["seconds"][f"{kind}_cpu"]) for kind in data["ratio_to_gcsfs"]), data["seconds"]


def test_the_store_benchmark_caps_the_link_of_the_server_alone(tmp_path) -> None:
    """`--link-mbit` shapes the server's port with tc (root only): a download cannot beat
    the link it is given, and the shaping is gone afterwards."""
    tc = require_tool("tc", "the store benchmark shapes a link with Linux traffic control (apt: iproute2)")
    if os.geteuid() != 0:
        pytest.skip("shaping the loopback device needs root")
    mbit, mib = 100, 4
    args = ("--targets", "10", "--packages", "1", "--delays", "0", "--size-mib", str(mib), "--small-files", "20")
    data = _run("store.py", tmp_path, *args, "--repeat", "1", "--link-mbit", str(mbit))
    large = data["large_output"]
    assert _positive(large["download_link_ratio"]) and _positive(large["download_unchecked_link_ratio"]), large
    wire_s = mib * 8 * 2**20 / (mbit * 10**6)  # 0.34 s at the link's rate
    for kind in ("download_link", "download_gcsfs_link", "download_unchecked_link"):
        assert large["seconds"][kind] > 0.8 * wire_s, (kind, large["seconds"])
    assert large["seconds"]["download_gcsfs_again"] < 0.8 * wire_s, large["seconds"]  # unshaped before
    shaped = subprocess.run([tc, "qdisc", "show", "dev", "lo"], capture_output=True, text=True, check=True).stdout
    assert "htb" not in shaped, shaped


def test_one_core_holds_both_processes_there_and_lets_them_go_afterwards(monkeypatch) -> None:
    """`--one-core` moves every thread of the benchmark and of the server to one core, and
    gives both back every core afterwards (else the measurements after it run on one)."""
    monkeypatch.syspath_prepend(str(BENCH))
    store = importlib.import_module("store")
    allowed = os.sched_getaffinity(0)
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); time.sleep(60)",
        ]
    )
    try:
        deadline = time.monotonic() + 30
        while len(os.listdir(f"/proc/{server.pid}/task")) < 2:  # its second thread has started
            assert time.monotonic() < deadline and server.poll() is None, "the stand-in server did not start"
            time.sleep(0.01)
        threads = store._threads(os.getpid()) + store._threads(server.pid)
        with store.on_one_core(server.pid) as moved:
            assert moved >= len(threads)
            held: list[set[int]] = []
            started = threading.Thread(target=lambda: held.append(os.sched_getaffinity(0)))
            started.start()
            started.join()
            assert {frozenset(os.sched_getaffinity(tid)) for tid in threads} == {frozenset({min(allowed)})}
            assert held == [{min(allowed)}]  # a thread started meanwhile inherits the core
        assert all(os.sched_getaffinity(tid) == allowed for tid in threads)
    finally:
        server.kill()
        server.wait()


def test_the_sweep_benchmark_times_the_sweep_unbuilt_and_its_stand_in_built(tmp_path) -> None:
    data = _run("sweep.py", tmp_path, "--runs", "3", "--repeat", "1", timeout=900)
    unbuilt, built = data["unbuilt"], data["built"]
    assert unbuilt["query_warm"]["lines"] == unbuilt["genrules_query_warm"]["lines"] == 3 + 3, unbuilt
    assert built["compare"]["lines"] >= 3, built  # a row per run
    measured = [built["first_noop"]["s"], built["certified_noop"]["s"]["median"], *data["ratios"].values()]
    assert all(_positive(value) for value in measured), data


def test_the_training_benchmark_runs_the_examples_dense_moe_and_lora_runs_both_ways(tmp_path) -> None:
    data = _run("train_overhead.py", tmp_path, "--steps", "8", "--repeats", "1", timeout=1500)
    assert set(data["runs"]) == {"dense", "moe", "sft"}
    for run in data["runs"].values():
        assert len(run["seconds"]["marinbuild"]) == len(run["seconds"]["direct"]) == 1, run
        assert _positive(run["ratio"]) and _positive(run["tokens_per_s_ratio"]), run
        # The direct run's teardown is part of its seconds, and the ratio without it the larger.
        assert len(run["direct_teardown_s"]) == 1 and 0 <= run["direct_teardown_s"][0] < run["seconds"]["direct"][0]
        assert run["ratio_without_teardown"] >= run["ratio"], run
    assert data["devices"] and all(device.endswith("cpu") for device in data["devices"]), data["devices"]


def test_the_hf_export_benchmark_trains_with_and_without_the_export_and_times_export_hf_both_ways(tmp_path) -> None:
    data = _run("hf_export.py", tmp_path, "--steps", "4", "--repeats", "1", timeout=1200)
    assert all(_positive(value) for value in data["ratio_with_export"].values()), data
    assert _positive(data["export_to_checkpoint_bytes"]) and _positive(data["export_hf_ratio"]), data
    assert data["runs"]["without export"][0]["export_bytes"] == 0 < data["runs"]["with export"][0]["export_bytes"]
    # The last step exported through marinbuild and directly.
    assert [len(seconds) for seconds in data["export_hf_s"].values()] == [1, 1], data["export_hf_s"]


def test_the_mixture_benchmark_builds_the_study_twice_grows_it_and_reads_the_goals(tmp_path) -> None:
    data = _run("mixtures.py", tmp_path, "--toy", "--grow", "1", timeout=1500)
    assert data["cold_built"]["train_lm"] == 5 + 7 and data["second_built"] == {}, data
    assert data["grow_built"]["train_lm"] >= 1 and data["grow_built"]["mixture_draw"] == 1, data
    assert data["grow_built"].get("tokenize") is None, data  # the data is not made again
    goals = data["goals"]
    for scale in ("swarm", "larger"):
        assert _positive(goals[f"{scale}.proposal_over_uniform"]) and isinstance(goals[f"{scale}.holds"], bool)
    assert _positive(goals["swarm.predicted_over_actual"]) and _positive(goals["loo_rmse_over_lightgbm"])


def test_the_compilation_cache_benchmark_trains_without_with_a_cold_and_a_warm_cache(tmp_path) -> None:
    data = _run("compile_cache.py", tmp_path, "--steps", "4", "--repeats", "1", timeout=900)
    for variant in ("no cache", "cold cache", "warm cache"):
        assert _positive(data["median_s"][variant]["first_step_s"]), data
        assert _positive(data["ratio_to_no_cache"][variant]["first_step_s"])
    assert data["cache_bytes"] > 0


def test_the_extraction_benchmark_scores_and_times_the_extractor_and_both_warc_readers(tmp_path) -> None:
    args = ("--pages", "30", "--stdlib-modules", "0", "--repeat", "1", "--skip-trafilatura")
    data = _run("extract.py", tmp_path, *args)
    resiliparse = data["extractors"]["resiliparse"]
    assert _positive(resiliparse["pages_per_cpu_s"]) and 0 < resiliparse["f1"] <= 1, resiliparse
    assert data["pages"] > 0 and set(data["extractors"]) == {"resiliparse"}
    readers = data["warc_readers"]
    assert readers["fastwarc"]["records"] == readers["warcio"]["records"] == data["pages"] + data["kinds"]["malformed"]
    assert _positive(readers["fastwarc"]["records_per_cpu_s"]) and _positive(readers["warcio"]["records_per_cpu_s"])


def test_the_dedup_benchmark_times_the_signatures_measures_the_reduce_and_the_bloom_filter(tmp_path) -> None:
    args = ("--pages", "60", "--stdlib-modules", "0", "--repeat", "1", "--documents", "20000", "--paragraphs", "2000")
    data = _run("dedup.py", tmp_path, *args, "--skip-datasketch")
    signatures = data["signatures"]
    assert set(signatures) == {"numpy"} and _positive(signatures["numpy"]["documents_per_cpu_s"]), signatures
    assert 0 < signatures["numpy"]["precision"] <= 1 and 0 <= signatures["numpy"]["near_recall"] <= 1
    assert [r["documents"] for r in data["reduce"]] == [2000, 20000]
    for reduce in data["reduce"]:
        assert _positive(reduce["peak_rss_bytes"]) and _positive(reduce["traced_peak_bytes"]), reduce
        assert reduce["found_near_duplicates"] == reduce["documents"] // 10, reduce  # the synthetic copies
    bloom = data["bloom"]
    assert bloom["set"]["repeats"] == bloom["repeats_generated"] and 0 <= bloom["rbloom"]["false_positive_rate"] < 0.01
    assert _positive(data["ratios"]["rbloom_to_set_bytes_per_item"])


def test_the_dedup_scale_benchmark_reduces_in_ray_tasks_at_two_sizes_as_the_one_process_reduce(tmp_path) -> None:
    data = _run("dedup_scale.py", tmp_path, "--toy", timeout=900)
    assert set(data["sizes"]) == {"20000", "60000"}
    small = data["sizes"]["20000"]
    assert small["same_counts_as_one_process"] is True, (small["counts"], small["one_process"]["counts"])
    for found in data["sizes"].values():
        assert _positive(found["worker_peak_bytes"]) and _positive(found["shuffled_bytes"]), found
        assert found["counts"]["exact_duplicates"] > 0 and found["counts"]["near_duplicates"] > 0, found
        assert {"bucket", "pairs", "attach", "verify", "decide"} <= set(found["waves"]), found["waves"]
    assert _positive(data["worker_peak_ratio"]) and _positive(data["seconds_per_document_ratio"])


def test_the_data_benchmark_filters_and_dedups_through_marinbuild_builds_at_each_worker_count(tmp_path) -> None:
    args = ("--pages", "300", "--stdlib-modules", "0", "--shards", "2", "--workers", "1,2")
    data = _run("data.py", tmp_path, *args, "--skip-datatrove")
    assert set(data["tools"]) == {"marinbuild"} and set(data["tools"]["marinbuild"]) == {"1", "2"}, data
    assert data["documents"] > 0 and data["corpus_bytes"] > 0 and not data["ratios"]
    one, two = data["tools"]["marinbuild"]["1"], data["tools"]["marinbuild"]["2"]
    for figures in (one, two):
        rates = [figures[name] for name in ("documents_per_cpu_s", "documents_per_s_per_worker", "ingest_s")]
        assert all(_positive(rate) for rate in rates) and set(figures["step_s"]) == {"filtered", "deduped"}
        assert 0 < figures["dedup_kept"] < figures["filters_kept"] < data["documents"], figures
        quality = figures["dedup"]
        assert 0 < quality["precision_injected"] <= quality["precision_similar"] <= 1, quality
        assert quality["near_duplicates"] > 0 and 0 < quality["near_recall"] <= 1, quality
    # Two workers make the same outputs as one: only the speed may differ.
    assert (one["filters_kept"], one["dedup_kept"], one["dedup"]) == (
        two["filters_kept"],
        two["dedup_kept"],
        two["dedup"],
    )
    assert data["speedup_over_fewest_workers"]["marinbuild"]["1"] == 1.0


def test_the_shards_benchmark_plans_noops_and_starts_a_sharded_step_locally_and_on_a_bucket(tmp_path) -> None:
    data = _run("shards.py", tmp_path, "--toy", "--baseline-src", str(ROOT))  # itself: the ratios are made
    large, per_shard = data["local"]["large"], data["local"]["per_shard"]
    for figure in ("plan_s", "noop_s", "dry_run_s", "plan_peak_rss_mib"):
        assert _positive(large[figure]), large
    for compared in (large["plan_compared"], large["first_unit_compared"]):
        assert _positive(compared["this_s"]) and _positive(compared["to_baseline"]), compared
    # Memory per shard is a difference of two peaks: noise at a toy size, of either sign.
    assert _positive(per_shard["plan_ms_per_shard"]) and isinstance(per_shard["driver_bytes_per_shard"], float)
    bucket = data["bucket"]
    for size in ("40", "120"):
        assert bucket[size]["requests"] > 0 and _positive(bucket[size]["plan_requests_per_shard"]), bucket[size]
        assert _positive(bucket[size]["first_unit_compared"]["this_s"]), bucket[size]
    assert bucket["requests_growth"] == 0, bucket  # a no-op asks nothing per shard


def test_the_tokenized_shards_benchmark_opens_one_cache_and_a_cache_per_shard_and_trains_over_both(tmp_path) -> None:
    args = ("--shards", "12", "--docs-per-shard", "40", "--repeat", "1", "--steps", "2")  # 48 to evaluate on
    data = _run("tokenized_shards.py", tmp_path, *args, timeout=1500)
    levanter = data["levanter"]
    assert levanter["rows"] == 12 * 40 and _positive(levanter["per_shard_to_one"]), levanter
    assert _positive(levanter["bucket"]["per_shard_to_one"]), levanter["bucket"]
    training = data["training"]
    assert training["many"]["corpus_shards"] == 12 and training["one"]["corpus_shards"] == 1, training
    assert training["many"]["ledgers_per_split"] == training["one"]["ledgers_per_split"] == 1, training
    assert _positive(training["many_to_one"]), training


def _documented_runs() -> Iterator[tuple[str, str, str]]:
    """(where, script, arguments) of every benchmark command line of the docs."""
    for path in DOCS:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in DOC_LINE.finditer(line):
                yield f"{path.relative_to(ROOT)}:{number}", match.group(1), match.group(2)


def test_every_benchmark_command_line_of_the_docs_parses(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    runs = list(_documented_runs())
    assert {script for _, script, _ in runs} >= {
        "noop",
        "store",
        "write_pieces",
        "query",
        "compile_cache",
        "train_overhead",
        "extract",
        "dedup",
        "data",
        "graph_scale",
        "sweep",
        "shards",
        "tokenized_shards",
    }, runs
    for where, script, arguments in runs:
        module = importlib.import_module(script)
        try:
            module.parse_args(shlex.split(arguments))
        except SystemExit:
            pytest.fail(f"{where}: python bench/{script}.py{arguments}: the script refuses these arguments")
