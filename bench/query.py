"""Query speed: ``marinbuild query`` over the 10,000-target workspace.

Generates the workspace of bench/gen_workspace.py (10,000 genrules in 500
packages) and times, each in a fresh process, ``marinbuild query 'deps(//...)'``
and ``marinbuild query 'rdeps(//..., T)'`` for an early target T with many
reverse dependencies.  The baseline, measured in the same run, is
``marinbuild build --dry-run --json //...``: the loading and planning a build
does before it runs anything.  Each command is timed cold (no package memo:
every BUILD file is evaluated) and warm (packages come from
``.marinbuild/packages.pickle``), ``--repeat`` times, and the median reported.
The number of labels each query prints is checked against the DAG.

Usage: ``python bench/query.py [--targets N] [--packages P] [--seed S]
[--repeat R] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import benchlib
import gen_workspace as gen

# The rdeps target: the first target of this package (early, so much depends on it).
RDEPS_PACKAGE = 10


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=gen.DEFAULT_TARGETS, help="default: %(default)s")
    parser.add_argument("--packages", type=int, default=gen.DEFAULT_PACKAGES, help="default: %(default)s")
    parser.add_argument("--seed", type=int, default=gen.DEFAULT_SEED, help="default: %(default)s")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per command and state (default: %(default)s)")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="generate in this new or empty dir and keep it (default: a temp dir, removed afterwards)",
    )
    parser.add_argument("--json-out", type=Path, help="also write results as JSON here")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if not RDEPS_PACKAGE < args.packages <= args.targets:
        parser.error(f"need {RDEPS_PACKAGE} < --packages <= --targets")
    return args


def reverse_closure(dag: Sequence[gen.Target], index: int) -> int:
    """How many targets depend on target `index`, itself included (deps point to lower indices)."""
    reached = {index}
    for target in dag[index + 1 :]:
        if reached.intersection(target.deps):
            reached.add(target.index)
    return len(reached)


def label(target: gen.Target) -> str:
    return f"//{target.package_dir}:{target.name}"


def measure(marinbuild: str, workspace: Path, args: list[str], lines: int | None, repeat: int) -> dict:
    """Median seconds of `marinbuild ARGS`, cold then warm; checks the number of output lines."""
    memo = workspace / ".marinbuild"
    results = {}
    for state in ("cold", "warm"):
        samples = []
        for _ in range(repeat):
            if state == "cold":
                shutil.rmtree(memo, ignore_errors=True)
            run = benchlib.run_timed([marinbuild, "--workspace", workspace, *args], cwd=workspace)
            if lines is not None and len(run.stdout.splitlines()) != lines:
                raise benchlib.BenchError(
                    f"{' '.join(args)} printed {len(run.stdout.splitlines())} lines, expected {lines}"
                )
            samples.append(run.seconds)
        benchlib.log(f"{' '.join(args)}: {state}, {min(samples):.3f}-{max(samples):.3f} s")
        results[state] = benchlib.summarize(samples)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict = {"benchmark": "query", "config": benchlib.jsonable(vars(args)), "host": benchlib.host_info()}
    try:
        marinbuild = benchlib.find_marinbuild()
        with benchlib.work_dir(args.workdir) as root:
            workspace = root / "marinbuild"
            dag = gen.generate_dag(args.targets, args.packages, args.seed)
            gen.write_marinbuild(dag, workspace)
            target = dag[gen.first_target_of(RDEPS_PACKAGE, args.targets, args.packages)]
            commands = {
                "baseline: build --dry-run //...": (["build", "--dry-run", "--json", "//..."], None),
                "query 'deps(//...)'": (["query", "deps(//...)"], args.targets),
                f"query 'rdeps(//..., {label(target)})'": (
                    ["query", f"rdeps(//..., {label(target)})"],
                    reverse_closure(dag, target.index),
                ),
            }
            for name, (command, lines) in commands.items():
                results[name] = measure(marinbuild, workspace, command, lines, args.repeat)
    except benchlib.BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    baseline = results["baseline: build --dry-run //..."]
    rows = []
    for name in commands:
        cold, warm = results[name]["cold"]["median"], results[name]["warm"]["median"]
        rows.append([name, cold, warm, cold / baseline["cold"]["median"], warm / baseline["warm"]["median"]])
    benchlib.print_table(["command", "cold s", "warm s", "cold / baseline", "warm / baseline"], rows)
    if args.json_out:
        benchlib.write_json(args.json_out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
