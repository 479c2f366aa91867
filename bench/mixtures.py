"""The mixture study of experiments/mixtures, from an empty store: its time, what a second
build and a larger swarm rerun, and whether the proposal meets the goals of docs/mixtures.md.

It copies the study (experiments/mixtures, the crawls of experiments/datamix it mixes, the
macros) into a fresh workspace with an empty store, then:

1. builds `//experiments/mixtures:all` (timed: the goal is under 30 minutes on two cores);
2. builds it again: nothing may run;
3. with `--grow N`, raises the swarm's `runs` by N and builds again: exactly N more
   trainings (and their draws and evaluations) may run, besides the table, the fit and
   whatever follows a changed proposal;
4. reads fit.json and validation.json and reports, as ratios against baselines measured in
   the same run: the proposal's target loss over the swarm's best run's and the uniform
   mixture's, at the swarm's scale and the larger one; the fit's prediction for the
   proposal over its actual loss; the leave-one-out error of the fitted law over
   LightGBM's on the same table (RegMix's regression).

`--toy` shrinks the study (five runs of four steps) so that the script can be checked in
minutes; its figures say nothing about mixtures.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from benchlib import (
    BenchError,
    find_marinbuild,
    host_info,
    log,
    parse_trailing_json,
    print_table,
    run_timed,
    work_dir,
    write_json,
)

ROOT = Path(__file__).resolve().parents[1]
STUDY = "//experiments/mixtures:all"
COPIED = ("experiments/mixtures", "experiments/datamix", "rules/lm/lm.star", "rules/mixtures/mixtures.star")
RUNS = re.compile(r"runs = (\d+),")
TOY = {
    r"runs = \d+,": "runs = 5,",
    r'"steps": 60, "batch_size": 16, "eval_interval": 60': '"steps": 4, "batch_size": 4, "eval_interval": 4',
    r'"steps": 180, "batch_size": 16, "eval_interval": 180': '"steps": 8, "batch_size": 4, "eval_interval": 8',
    r"tokens = 180 \* 16 \* 128": "tokens = 8 * 4 * 128",
}


def _workspace(root: Path, toy: bool) -> Path:
    for path in COPIED:
        source, target = ROOT / path, root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")  # the workspace's rules and settings
    if toy:
        build = root / "experiments/mixtures/BUILD.marin"
        text = build.read_text()
        for pattern, replacement in TOY.items():
            text, count = re.subn(pattern, replacement, text)
            if count != 1:
                raise BenchError(f"--toy: {pattern!r} is not in experiments/mixtures/BUILD.marin once")
        build.write_text(text)
    return root


def _build(marinbuild: str, ws: Path) -> tuple[float, dict]:
    run = run_timed([marinbuild, "--workspace", ws, "--store", ws / "store", "build", STUDY, "--json"], cwd=ws)
    return run.seconds, parse_trailing_json(run.stdout)


def _built(report: dict, rule_of: dict[str, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in report["targets"]:
        if item["status"] == "built":
            counts[rule_of.get(item["label"], "?")] = counts.get(rule_of.get(item["label"], "?"), 0) + 1
    return counts


def _rules(marinbuild: str, ws: Path) -> dict[str, str]:
    run = run_timed([marinbuild, "--workspace", ws, "query", f"deps({STUDY})", "--output", "json"], cwd=ws)
    return {item["label"]: item["kind"].removesuffix(" rule") for item in json.loads(run.stdout)}


def _output(report: dict, label: str, name: str) -> dict:
    item = next(item for item in report["targets"] if item["label"] == label)
    return json.loads((Path(item["output"]) / name).read_text())


def goals(fit: dict, validation: dict) -> dict[str, float | bool]:
    """The goals of docs/mixtures.md as ratios (below 1: the proposal is better)."""
    found: dict[str, float | bool] = {}
    for scale in validation["scales"]:
        runs, name = scale["runs"], scale["scale"]
        proposal = runs["proposal"]["loss"]
        for reference in ("best_run", "uniform", "prior"):
            if reference in runs:
                found[f"{name}.proposal_over_{reference}"] = proposal / runs[reference]["loss"]
        found[f"{name}.holds"] = bool(scale.get("holds"))
        if "prediction_error" in scale:
            found[f"{name}.predicted_over_actual"] = fit["proposal"]["predicted"] / proposal
    compared = fit["compared"]
    found["loo_rmse_over_lightgbm"] = compared[fit["regression"]]["rmse"] / compared["lightgbm"]["rmse"]
    found["loo_mean_relative_error"] = compared[fit["regression"]]["mean_relative_error"]
    found["lightgbm_loo_mean_relative_error"] = compared["lightgbm"]["mean_relative_error"]
    return found


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grow", type=int, default=0, help="Raise the swarm's runs by this many after (0: no).")
    parser.add_argument("--toy", action="store_true", help="A study of five runs of four steps: checks the script.")
    parser.add_argument("--workdir", type=Path, default=None, help="Keep the workspace and store here (new or empty).")
    parser.add_argument("--json-out", type=Path, default=None, help="Write the figures here as JSON.")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    marinbuild = find_marinbuild()
    with work_dir(args.workdir) as root:
        ws = _workspace(root / "ws", args.toy)
        rule_of = _rules(marinbuild, ws)
        log(f"building {STUDY} from an empty store ({len(rule_of)} targets)")
        cold_s, cold = _build(marinbuild, ws)
        again_s, again = _build(marinbuild, ws)
        figures: dict = {
            "host": host_info(),
            "toy": args.toy,
            "targets": len(rule_of),
            "cold_s": cold_s,
            "cold_built": _built(cold, rule_of),
            "second_s": again_s,
            "second_built": _built(again, rule_of),
        }
        if figures["second_built"]:
            raise BenchError(f"a second build ran {figures['second_built']}")
        fit = _output(cold, "//experiments/mixtures:law", "fit.json")
        validation = _output(cold, "//experiments/mixtures:check", "validation.json")
        figures["goals"] = goals(fit, validation)
        figures["proposal"] = fit["proposal"]
        if args.grow:
            build = ws / "experiments/mixtures/BUILD.marin"
            runs = int(RUNS.search(build.read_text()).group(1))  # type: ignore[union-attr]
            build.write_text(RUNS.sub(f"runs = {runs + args.grow},", build.read_text(), count=1))
            rule_of = _rules(marinbuild, ws)
            figures["grow_s"], grown = _build(marinbuild, ws)
            figures["grow_built"] = _built(grown, rule_of)
        rows = [[name, value] for name, value in figures["goals"].items()]
        rows += [["cold build (s)", cold_s], ["second build (s)", again_s]]
        if args.grow:
            rows += [[f"+{args.grow} runs (s)", figures["grow_s"]], ["+runs built", figures["grow_built"]]]
        print_table(["figure", "value"], rows)
        if args.json_out:
            write_json(args.json_out, figures)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as error:
        print(f"bench/mixtures.py: {error}", file=sys.stderr)
        sys.exit(1)
