"""Whether the engine's cost per action grows with the graph: cold builds and no-ops at two sizes.

Generates the random DAG of bench/gen_workspace.py (one-line genrules, 20 targets a
package by default) at `--small` and at `--large` targets and, for each, in fresh
`marinbuild` processes:

* a cold build (`build //... --jobs J`): its actions per second, CPU time and peak memory;
* the first no-op after it, the one no certificate answers (the cold build writes none:
  its targets were built, not cached), which writes the memos (and the certificate, but
  for outputs published in the racy window before it: then an untimed no-op after the
  window writes it);
* `--repeat` no-ops that take the full path (`MARINBUILD_NOOP_CERTIFICATE=0`), the
  memos written, and as many certified no-ops.

It reports each figure per target and the large size's over the small one's: 1 is
linear growth (a cold build's rate the same at both sizes), above 1 the engine's own
cost per action grows with the graph. Wall times on a shared machine move with its
load; CPU times (user + system, of the builder and the steps it ran) move least.

Usage: ``python bench/graph_scale.py [--small N] [--large N] [--per-package K]
[--seed S] [--jobs J] [--repeat R] [--workdir DIR] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import benchlib
import gen_workspace as gen

from marinbuild.hashing import RACY_NS

UNCERTIFIED = {"MARINBUILD_NOOP_CERTIFICATE": "0"}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=10_000, help="targets of the small DAG (default: %(default)s)")
    parser.add_argument("--large", type=int, default=100_000, help="targets of the large DAG (default: %(default)s)")
    parser.add_argument("--per-package", type=int, default=20, help="targets a package (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=gen.DEFAULT_SEED, help="default: %(default)s")
    parser.add_argument("--jobs", type=int, default=2, help="marinbuild --jobs (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="no-ops of each kind (default: %(default)s)")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="generate and build in this new or empty dir and keep it (default: a temp dir, removed afterwards)",
    )
    parser.add_argument("--json-out", type=Path, help="also write results as JSON here")
    args = parser.parse_args(argv)
    if not 1 <= args.per_package <= args.small < args.large:
        parser.error("need 1 <= --per-package <= --small < --large")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def _figures(run: benchlib.Run) -> dict[str, float]:
    return {"s": run.seconds, "cpu_s": run.cpu_s, "peak_rss_mib": run.peak_rss_mib}


def measure(marinbuild: str, root: Path, targets: int, args: argparse.Namespace) -> dict:
    """A cold build of `targets` targets, the first no-op after it, then `--repeat`
    uncertified and certified no-ops each, alternating."""
    packages = max(1, targets // args.per_package)
    workspace = root / f"marinbuild-{targets}"
    gen.write_marinbuild(gen.generate_dag(targets, packages, args.seed), workspace)
    benchlib.log(f"cold build of {targets} targets in {packages} packages")
    cold, report = benchlib.marinbuild_build(marinbuild, workspace, args.jobs)
    benchlib.check_counts(report, targets, built=targets)
    benchlib.log(f"cold build: {cold.seconds:.1f} s, {targets / cold.seconds:.0f} actions/s")
    first, report = benchlib.marinbuild_build(marinbuild, workspace, args.jobs)
    benchlib.check_counts(report, targets, built=0)
    benchlib.log(f"first no-op: {first.seconds:.2f} s, {first.peak_rss_mib:.0f} MiB")
    # The first no-op certifies nothing when the cold build published outputs within the
    # racy window of its start (the last seconds' outputs): one more, untimed, once they
    # have settled, writes the certificate the certified no-ops below are answered from.
    time.sleep(RACY_NS / 1e9)
    benchlib.marinbuild_build(marinbuild, workspace, args.jobs)
    noops: dict[str, list[dict[str, float]]] = {"uncertified": [], "certified": []}
    for _ in range(args.repeat):
        for kind, env in (("uncertified", UNCERTIFIED), ("certified", None)):
            run, report = benchlib.marinbuild_build(marinbuild, workspace, args.jobs, env)
            benchlib.check_counts(report, targets, built=0)
            noops[kind].append(_figures(run))
    benchlib.log(
        "no-ops: " + ", ".join(f"{kind} {min(run['s'] for run in runs):.2f} s" for kind, runs in noops.items())
    )
    found = {
        "targets": targets,
        "packages": packages,
        "cold": _figures(cold) | {"actions_per_s": targets / cold.seconds},
        "first_noop": _figures(first),
    }
    for kind, runs in noops.items():
        found[f"{kind}_noop"] = {
            figure: benchlib.summarize([run[figure] for run in runs]) for figure in ("s", "cpu_s", "peak_rss_mib")
        }
    return found


def ratios(small: dict, large: dict) -> dict[str, float]:
    """Each cost per target at the large size over the small size's (1: linear)."""

    def per_target(found: dict, name: str, figure: str) -> float:
        value = found[name][figure]
        return (value["median"] if isinstance(value, dict) else value) / found["targets"]

    found = {"cold_actions_per_s small/large": small["cold"]["actions_per_s"] / large["cold"]["actions_per_s"]}
    for name in ("cold", "first_noop", "uncertified_noop", "certified_noop"):
        for figure in ("s", "cpu_s", "peak_rss_mib"):
            found[f"{name}_{figure} per target large/small"] = per_target(large, name, figure) / per_target(
                small, name, figure
            )
    return found


def print_report(results: dict) -> None:
    rows = []
    for size in ("small", "large"):
        found = results[size]
        rows.append(
            [
                found["targets"],
                found["cold"]["s"],
                found["cold"]["actions_per_s"],
                found["cold"]["cpu_s"] * 1000 / found["targets"],
                found["cold"]["peak_rss_mib"],
                found["first_noop"]["s"],
                found["first_noop"]["peak_rss_mib"],
                found["uncertified_noop"]["s"]["median"],
                found["uncertified_noop"]["peak_rss_mib"]["median"],
                found["certified_noop"]["s"]["median"],
            ]
        )
    benchlib.print_table(
        [
            "targets",
            "cold s",
            "actions/s",
            "cold CPU ms/action",
            "cold MiB",
            "first no-op s",
            "first no-op MiB",
            "uncertified no-op s",
            "uncertified MiB",
            "certified no-op s",
        ],
        rows,
    )
    for name, value in results["ratios"].items():
        print(f"{name}: {value:.3g}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict = {"benchmark": "graph_scale", "config": benchlib.jsonable(vars(args)), "host": benchlib.host_info()}
    try:
        marinbuild = benchlib.find_marinbuild()
        with benchlib.work_dir(args.workdir) as root:
            results["small"] = measure(marinbuild, root, args.small, args)
            results["large"] = measure(marinbuild, root, args.large, args)
    except benchlib.BenchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    results["ratios"] = ratios(results["small"], results["large"])
    print_report(results)
    if args.json_out:
        benchlib.write_json(args.json_out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
