"""Per-action overhead: cold builds of ~1,000 trivial steps, marinbuild vs peers.

Generates one random DAG (bench/gen_workspace.py; default 1,000 targets in 50
packages) and builds it cold, in the same run, with marinbuild (``--jobs``),
Snakemake (``--cores``, same number) and DVC (``dvc repro --all-pipelines``,
which always runs stages one at a time).  Each step's command is a trivial
``cat | cksum`` + ``echo``, so the wall time divided by the number of steps
is the tool's own per-action cost: scheduling, bookkeeping, hashing, caching.

Usage: ``python bench/action_overhead.py [--targets N] [--packages P]
[--seed S] [--jobs J] [--skip-dvc] [--skip-snakemake] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import benchlib
import gen_workspace as gen

DEFAULT_TARGETS = 1_000
DEFAULT_PACKAGES = 50


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=DEFAULT_TARGETS, help="default: %(default)s")
    parser.add_argument("--packages", type=int, default=DEFAULT_PACKAGES, help="default: %(default)s")
    parser.add_argument("--seed", type=int, default=gen.DEFAULT_SEED, help="default: %(default)s")
    parser.add_argument("--jobs", type=int, default=2, help="marinbuild --jobs and Snakemake --cores (DVC is serial)")
    parser.add_argument("--skip-dvc", action="store_true")
    parser.add_argument("--skip-snakemake", action="store_true")
    parser.add_argument(
        "--skip-marinbuild", action="store_true", help="measure only the peers (e.g. before the engine exists)"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="generate and build in this new or empty dir and keep it (default: a temp dir, removed afterwards)",
    )
    parser.add_argument("--json-out", type=Path, help="also write results as JSON here")
    args = parser.parse_args(argv)
    if not 1 <= args.packages <= args.targets:
        parser.error("need 1 <= --packages <= --targets")
    return args


def cold_marinbuild(marinbuild: str, root: Path, dag: Sequence[gen.Target], jobs: int) -> dict:
    workspace = root / "marinbuild"
    gen.write_marinbuild(dag, workspace)
    run, report = benchlib.marinbuild_build(marinbuild, workspace, jobs)
    benchlib.check_counts(report, len(dag), built=len(dag))
    labels = {f"//{t.package_dir}:{t.name}": t.out_path for t in dag}
    return {
        "version": benchlib.tool_version([marinbuild, "--version"]),
        "command": f"marinbuild build //... --jobs {jobs}",
        "cold_s": run.seconds,
        "outputs_sha256": benchlib.outputs_digest(benchlib.marinbuild_output_files(report, labels)),
    }


def cold_snakemake(snakemake: Path, root: Path, dag: Sequence[gen.Target], jobs: int) -> dict:
    workdir = root / "snakemake"
    gen.write_snakemake(dag, workdir)
    run = benchlib.snakemake_build(snakemake, workdir, jobs)
    outputs = benchlib.existing_outputs(workdir, [t.out_path for t in dag])
    return {
        "version": benchlib.tool_version([snakemake, "--version"]),
        "command": f"snakemake --cores {jobs} --quiet {' '.join(benchlib.SNAKEMAKE_FAST)}",
        "cold_s": run.seconds,
        "outputs_sha256": benchlib.outputs_digest(outputs),
    }


def cold_dvc(dvc: Path, root: Path, dag: Sequence[gen.Target]) -> dict:
    repo = root / "dvc"
    gen.write_dvc(dag, repo)
    benchlib.dvc_init(dvc, repo)
    run = benchlib.dvc_repro(dvc, repo)
    outputs = benchlib.existing_outputs(repo, [t.out_path for t in dag])
    return {
        "version": benchlib.tool_version([dvc, "--version"]),
        "command": " ".join(("dvc", *benchlib.DVC_REPRO)) + " (serial)",
        "cold_s": run.seconds,
        "outputs_sha256": benchlib.outputs_digest(outputs),
    }


def planned_tools(args: argparse.Namespace) -> dict[str, Callable[[Path, Sequence[gen.Target]], dict]]:
    """Tools to run, in order; peers missing from the peers venv are skipped."""
    tools: dict[str, Callable[[Path, Sequence[gen.Target]], dict]] = {}
    if not args.skip_marinbuild:
        marinbuild = benchlib.find_marinbuild()
        tools["marinbuild"] = lambda root, dag: cold_marinbuild(marinbuild, root, dag, args.jobs)
    if not args.skip_snakemake and (snakemake := benchlib.find_peer("snakemake")):
        tools["snakemake"] = lambda root, dag: cold_snakemake(snakemake, root, dag, args.jobs)
    if not args.skip_dvc and (dvc := benchlib.find_peer("dvc")):
        tools["dvc"] = lambda root, dag: cold_dvc(dvc, root, dag)
    return tools


def check_same_outputs(tools: dict[str, dict]) -> None:
    """Refuse to compare tools that did not compute byte-identical outputs."""
    digests = {name: result["outputs_sha256"] for name, result in tools.items()}
    if len(set(digests.values())) > 1:
        raise benchlib.BenchError(f"tools produced different outputs: {digests}")


def print_report(results: dict) -> None:
    tools, targets = results["tools"], results["targets"]
    base = tools.get("marinbuild")
    rows = []
    for name, result in tools.items():
        ratio = base["s_per_action"] / result["s_per_action"] if base else None
        rows.append([name, targets, result["cold_s"], 1000 * result["s_per_action"], ratio])
    benchlib.print_table(["tool", "actions", "cold s", "ms/action", "marinbuild/tool"], rows)
    if base:
        print("marinbuild/tool < 1 means marinbuild spends less time per action.")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    dag = gen.generate_dag(args.targets, args.packages, args.seed)
    results: dict = {
        "benchmark": "action_overhead",
        "config": benchlib.jsonable(vars(args)),
        "host": benchlib.host_info(),
        "targets": len(dag),
        "edges": sum(len(t.deps) for t in dag),
        "tools": {},
    }
    try:
        tools = planned_tools(args)
        with benchlib.work_dir(args.workdir) as root:
            for name, measure in tools.items():
                benchlib.log(f"{name}: cold build of {len(dag)} actions")
                result = measure(root, dag)
                result["s_per_action"] = result["cold_s"] / len(dag)
                benchlib.log(f"{name}: {result['cold_s']:.2f} s")
                results["tools"][name] = result
        check_same_outputs(results["tools"])
    except benchlib.BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print_report(results)
    if args.json_out:
        benchlib.write_json(args.json_out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
