"""No-op rebuild benchmark: marinbuild vs ``dvc repro`` on a large random DAG.

Generates the 10,000-target / 500-package workspace (bench/gen_workspace.py),
builds it once cold, then times ``--repeat`` no-op rebuilds and reports the
median and minimum.  For DVC it times both ``dvc repro --all-pipelines`` (the
real equivalent of a no-op build: it checks every stage and would run stale
ones) and ``dvc status`` (check only, never runs anything: a lower bound on
what DVC needs to decide that nothing changed).

A cold ``dvc repro`` of 10k stages took 16 minutes on the 2-core dev machine
(stages run serially, 50-100 ms each, more in bigger DAGs), so
``--dvc-targets N`` builds the DVC peer on a smaller DAG of the same shape
(same seed and targets per package).  All ratios are then computed per
target and say so.  Measured here, DVC's no-op repro costs about 7 ms per
stage at 1k-2k stages, 8 ms at 5k and 10-13 ms at 10k, so a DVC DAG of a few
thousand stages flatters DVC somewhat; below a few hundred, its ~1 s start-up
cost dominates instead.

Each marinbuild no-op is timed twice over: with Python's bytecode cache (the usual case),
and without it (`PYTHONDONTWRITEBYTECODE=1` and an empty `PYTHONPYCACHEPREFIX`: every
module compiled from source, as on a machine that never wrote its cache). Each run's peak
memory is recorded too. `--scale-targets N --scale-packages P` repeats the marinbuild
measurement on a second DAG (100,000 targets in 2,000 packages, say) and reports how the
no-op time per target grows with size.

`--baseline-bin PATH` measures a second marinbuild install (another commit's virtual
environment, say) on a copy of the same built workspace, its no-ops alternating with the
subject's, so that both see the same machine from one minute to the next: the ratios it
reports (subject / baseline) hold on a shared machine where absolute times do not.

Usage: ``python bench/noop.py [--targets N] [--packages P] [--seed S]
[--repeat R] [--skip-dvc] [--dvc-targets N] [--scale-targets N --scale-packages P]
[--baseline-bin PATH] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import benchlib
import gen_workspace as gen


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=gen.DEFAULT_TARGETS, help="default: %(default)s")
    parser.add_argument("--packages", type=int, default=gen.DEFAULT_PACKAGES, help="default: %(default)s")
    parser.add_argument("--seed", type=int, default=gen.DEFAULT_SEED, help="default: %(default)s")
    parser.add_argument("--repeat", type=int, default=5, help="timed no-op builds per tool (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, help="marinbuild --jobs (default: %(default)s)")
    parser.add_argument("--skip-dvc", action="store_true")
    parser.add_argument(
        "--skip-marinbuild", action="store_true", help="measure only the peer (e.g. before the engine exists)"
    )
    parser.add_argument(
        "--dvc-targets",
        type=int,
        help="build the DVC peer on a smaller DAG of this many targets (default: same as --targets)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="generate and build in this new or empty dir and keep it (default: a temp dir, removed afterwards)",
    )
    parser.add_argument("--scale-targets", type=int, help="also measure marinbuild on a DAG of this many targets")
    parser.add_argument("--scale-packages", type=int, help="packages of the --scale-targets DAG")
    parser.add_argument(
        "--baseline-bin",
        help="also time the no-ops of this marinbuild executable, alternating with the subject's, on a copy",
    )
    parser.add_argument("--json-out", type=Path, help="also write results as JSON here")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if not 1 <= args.packages <= args.targets:
        parser.error("need 1 <= --packages <= --targets")
    if args.dvc_targets is not None and args.dvc_targets < 1:
        parser.error("--dvc-targets must be at least 1")
    return args


def scaled_packages(targets: int, full_targets: int, full_packages: int) -> int:
    """Packages for a smaller DAG, keeping the same targets per package."""
    return max(1, round(targets * full_packages / full_targets))


def measure_marinbuild(
    marinbuild: str, root: Path, args: argparse.Namespace, targets: int, packages: int, baseline: str | None = None
) -> dict:
    """Cold build once, then ``--repeat`` verified no-op builds with the bytecode cache and
    as many without it; with `baseline`, each no-op is followed by the same no-op of the
    baseline's executable on its own copy of the built workspace (its memos its own)."""
    workspace = root / f"marinbuild-{targets}-{packages}"
    gen.write_marinbuild(gen.generate_dag(targets, packages, args.seed), workspace)
    benchlib.log(f"marinbuild: cold build of {targets} targets in {packages} packages")
    cold, report = benchlib.marinbuild_build(marinbuild, workspace, args.jobs)
    benchlib.check_counts(report, targets, built=targets)
    tools = {"": (marinbuild, workspace)}
    if baseline is not None:
        copy = root / f"baseline-{targets}-{packages}"
        shutil.copytree(workspace, copy, symlinks=True)
        tools["baseline_"] = (baseline, copy)
    # One untimed no-op each: right after the cold build (or the copy), the stat cache
    # distrusts digests recorded within 2 s of a file's modification and hashes the outputs again.
    for tool, tool_workspace in tools.values():
        benchlib.marinbuild_build(tool, tool_workspace, args.jobs)
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="marinbuild-no-pycache-") as empty:
        no_bytecode = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": empty}
        for i in range(args.repeat):
            for name, env in (("noop", None), ("noop_no_bytecode", no_bytecode)):
                for prefix, (tool, tool_workspace) in tools.items():
                    run, report = benchlib.marinbuild_build(tool, tool_workspace, args.jobs, env)
                    benchlib.check_counts(report, targets, built=0)
                    figures.setdefault(prefix + name, []).append(run.seconds)
                    figures.setdefault(prefix + "peak_rss_mib", []).append(run.peak_rss_mib)
                    if env is None:
                        figures.setdefault(prefix + "noop_cpu", []).append(run.cpu_s)
            benchlib.log(
                f"marinbuild: no-op {i + 1}/{args.repeat}: {figures['noop'][-1]:.3f} s, "
                f"{figures['noop_no_bytecode'][-1]:.3f} s without bytecode cache"
                + (
                    f"; baseline {figures['baseline_noop'][-1]:.3f} s, {figures['baseline_noop_no_bytecode'][-1]:.3f} s"
                    if baseline is not None
                    else ""
                )
            )
    found = {"targets": targets, "packages": packages, "cold_s": cold.seconds}
    for prefix, (tool, _workspace) in tools.items():
        found |= {
            f"{prefix}version": benchlib.tool_version([tool, "--version"]),
            f"{prefix}noop_s": benchlib.summarize(figures[prefix + "noop"]),
            f"{prefix}noop_no_bytecode_s": benchlib.summarize(figures[prefix + "noop_no_bytecode"]),
            f"{prefix}noop_cpu_s": benchlib.summarize(figures[prefix + "noop_cpu"]),
            f"{prefix}peak_rss_mib": max(figures[prefix + "peak_rss_mib"]),
        }
    if baseline is not None:
        # Each no-op over the baseline's that followed it, then the median: the machine's
        # drift from one minute to the next cancels within a pair.
        found["vs_baseline"] = {
            kind: statistics.median(
                mine / theirs for mine, theirs in zip(figures[kind], figures["baseline_" + kind], strict=True)
            )
            for kind in ("noop", "noop_no_bytecode", "noop_cpu")
        }
    return found


def measure_dvc(dvc: Path, root: Path, args: argparse.Namespace) -> dict:
    """Cold ``dvc repro`` once, then ``--repeat`` no-op repros and statuses."""
    targets = args.dvc_targets or args.targets
    packages = scaled_packages(targets, args.targets, args.packages)
    repo = root / "dvc"
    gen.write_dvc(gen.generate_dag(targets, packages, args.seed), repo)
    benchlib.dvc_init(dvc, repo)
    benchlib.log(
        f"dvc: cold repro of {targets} stages in {packages} dvc.yaml files, serial "
        f"(expect {targets * benchlib.DVC_COLD_S_PER_STAGE / 60:.0f}+ min)"
    )
    cold = benchlib.dvc_repro(dvc, repo)
    benchlib.log(f"dvc: cold repro took {cold.seconds:.1f} s")
    repro, status = [], []
    for i in range(args.repeat):
        repro.append(benchlib.dvc_repro_noop(dvc, repo).seconds)
        status.append(benchlib.dvc_status(dvc, repo).seconds)
        benchlib.log(f"dvc: no-op {i + 1}/{args.repeat}: repro {repro[-1]:.2f} s, status {status[-1]:.2f} s")
    return {
        "version": benchlib.tool_version([dvc, "--version"]),
        "targets": targets,
        "packages": packages,
        "cold_s": cold.seconds,
        "repro_noop_s": benchlib.summarize(repro),
        "status_noop_s": benchlib.summarize(status),
    }


def per_target(total: float, targets: int) -> float:
    return total / targets


def ratios(results: dict) -> dict[str, float]:
    """marinbuild no-op / DVC no-op, per target so unequal DAG sizes compare; and the no-op
    time per target of the larger DAG over the smaller one's (1: linear growth)."""
    mb, dvc, scale = results.get("marinbuild"), results.get("dvc"), results.get("marinbuild_scale")
    found: dict[str, float] = {}
    if mb and dvc:
        mb_noop = per_target(mb["noop_s"]["median"], mb["targets"])
        for kind in ("repro", "status"):
            found[f"marinbuild_noop/dvc_{kind}_noop"] = mb_noop / per_target(
                dvc[f"{kind}_noop_s"]["median"], dvc["targets"]
            )
    if mb and scale:
        for kind in ("noop_s", "noop_no_bytecode_s", "noop_cpu_s"):
            found[f"marinbuild_{kind}_per_target_{scale['targets']}/{mb['targets']}"] = per_target(
                scale[kind]["median"], scale["targets"]
            ) / per_target(mb[kind]["median"], mb["targets"])
    return found


def print_report(results: dict) -> None:
    rows = []
    for name in ("marinbuild", "marinbuild_scale"):
        if mb := results.get(name):
            rows.append(_row("marinbuild build", mb["targets"], mb["cold_s"], mb["noop_s"]))
            rows.append(_row("  (no bytecode cache)", mb["targets"], None, mb["noop_no_bytecode_s"]))
            rows.append(_row("  (CPU time, user + system)", mb["targets"], None, mb["noop_cpu_s"]))
            if "baseline_noop_s" in mb:
                rows.append(_row("baseline build", mb["targets"], None, mb["baseline_noop_s"]))
                rows.append(_row("  (no bytecode cache)", mb["targets"], None, mb["baseline_noop_no_bytecode_s"]))
                rows.append(_row("  (CPU time, user + system)", mb["targets"], None, mb["baseline_noop_cpu_s"]))
    if dvc := results.get("dvc"):
        rows.append(_row("dvc repro -P", dvc["targets"], dvc["cold_s"], dvc["repro_noop_s"]))
        rows.append(_row("dvc status", dvc["targets"], None, dvc["status_noop_s"]))
    benchlib.print_table(["tool", "targets", "cold s", "no-op median s", "no-op min s", "no-op ms/target"], rows)
    for name in ("marinbuild", "marinbuild_scale"):
        if mb := results.get(name):
            print(f"marinbuild, {mb['targets']} targets: peak memory of a no-op {mb['peak_rss_mib']:.0f} MiB")
    for name, value in results["ratios"].items():
        print(f"{name} (median, per target): {value:.3g}")
    for kind, value in results.get("marinbuild", {}).get("vs_baseline", {}).items():
        print(f"marinbuild {kind} / baseline {kind} (median of alternating pairs): {value:.3g}")
    mb, dvc = results.get("marinbuild"), results.get("dvc")
    if mb and dvc and mb["targets"] != dvc["targets"]:
        print(
            f"NOTE: DVC ran on a {dvc['targets']}-target DAG, marinbuild on "
            f"{mb['targets']}; ratios compare no-op time PER TARGET. Linear estimate "
            f"of a full-size dvc repro no-op: "
            f"{dvc['repro_noop_s']['median'] * mb['targets'] / dvc['targets']:.1f} s "
            f"(rough: DVC's start-up cost inflates per-target figures of small DAGs, "
            f"and its per-stage cost grows in big ones)."
        )


def _row(tool: str, targets: int, cold: float | None, noop: dict) -> list[object]:
    return [tool, targets, cold, noop["median"], noop["min"], 1000 * per_target(noop["median"], targets)]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    dvc = None if args.skip_dvc else benchlib.find_peer("dvc")
    results: dict = {"benchmark": "noop", "config": benchlib.jsonable(vars(args)), "host": benchlib.host_info()}
    try:
        marinbuild = None if args.skip_marinbuild else benchlib.find_marinbuild()
        with benchlib.work_dir(args.workdir) as root:
            if marinbuild is not None:
                results["marinbuild"] = measure_marinbuild(
                    marinbuild, root, args, args.targets, args.packages, args.baseline_bin
                )
                if args.scale_targets:
                    scale_packages = args.scale_packages or scaled_packages(
                        args.scale_targets, args.targets, args.packages
                    )
                    results["marinbuild_scale"] = measure_marinbuild(
                        marinbuild, root, args, args.scale_targets, scale_packages
                    )
            if dvc is not None:
                results["dvc"] = measure_dvc(dvc, root, args)
    except benchlib.BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    results["ratios"] = ratios(results)
    print_report(results)
    if args.json_out:
        benchlib.write_json(args.json_out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
