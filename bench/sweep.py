"""A sweep of 1,000 `train_lm` runs written as a Starlark loop: load, plan, query, no-op, compare.

The sweep is one BUILD file: a corpus, a tokenizer, its tokens, and a `for` loop of
`--runs` `train_lm` targets on a tiny Llama, each its own learning rate and seed. Each
command is timed in a fresh `marinbuild` process, `--repeat` times, medians reported:

* on the sweep as written (`rules.lm.decls`), unbuilt: `build --dry-run //exp:all`
  (loading and planning), `query 'deps(//exp:all)'`, each cold (`.marinbuild/` deleted:
  the BUILD file evaluated) and warm (packages from the package memo);
* the same query over the one-line genrules of bench/gen_workspace.py, as many targets,
  in the same run: the ratio of the two per target says whether a sweep's targets cost
  `query` more than the genrules of bench/query.py do;
* on the sweep built: the first no-op after its build, `--repeat` no-ops that take the
  full path (`MARINBUILD_NOOP_CERTIFICATE=0`) and certified ones, and
  `compare //exp:all` (every run's metrics and hyperparameters side by side).

Building 1,000 real trainings takes hours on 2 cores (20-50 s each, mostly JAX starting
and compiling), so the built sweep is a stand-in: one real training (`//exp:run_0` of
the sweep as written) is built, and the stand-in workspace declares `train_lm` as the
very rule of `rules.lm.decls` (its attributes, checks, code digests, metrics and
curves) but for its `impl`, which copies that training's output into the step's output
in the builder's thread. Its targets' keys, look-ups, outputs (94 files of one real run
each) and what `compare` reads are those of real trainings: only the trainings' own time
(and their metrics' values, all alike) is not.

Usage: ``python bench/sweep.py [--runs N] [--repeat R] [--jobs J] [--workdir DIR]
[--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import benchlib
import gen_workspace as gen

REPO = Path(__file__).resolve().parents[1]
UNCERTIFIED = {"MARINBUILD_NOOP_CERTIFICATE": "0"}
REAL_RULES = ["rules.data.decls", "rules.tokenize.decls", "rules.lm.decls"]
STAND_IN_RULES = ["rules.data.decls", "rules.tokenize.decls", "sweep_rules"]
UPSTREAM = 3  # corpus, tokenizer, tokens

BUILD = """\
load("//rules/lm:lm.star", "cpu", "llama")

python_corpus(name = "corpus", sample_count = 60, chunk_characters = 1500, validation_fraction = 0.1)
bpe_tokenizer(name = "tokenizer", data = ":corpus", vocab_size = 300)
tokenize(name = "tokens", data = ":corpus", tokenizer = ":tokenizer")

LEARNING_RATES = [1e-4 * (1 + i) for i in range(100)]

for i in range({runs}):
    train_lm(
        name = "run_%d" % i,
        data = ":tokens",
        model = llama(hidden = 32, layers = 1, heads = 2, seq_len = 64),
        optimizer = {{"learning_rate": LEARNING_RATES[i % 100]}},
        trainer = {{"steps": 2, "batch_size": 4, "eval_interval": 2, "checkpoint_interval": 2, "max_eval_batches": 1}},
        seed = i // 100,
        resources = cpu(),
    )
"""

# The stand-in's rule module: rules.lm.decls's train_lm with another impl (see the docstring).
STAND_IN = '''\
"""train_lm as rules.lm.decls declares it, but its impl copies one real training's output."""

import dataclasses
import shutil

from marinbuild.targets import Execution, Rule
from rules.lm import decls

TRAINED = {trained!r}


def _copy_of_a_training(ctx):
    shutil.copytree(TRAINED, ctx.out, dirs_exist_ok=True)


train_lm = dataclasses.replace(decls.train_lm, impl=_copy_of_a_training, execution=Execution.THREAD)
# The family's other rules as they are (lm.star's macros name them).
globals().update(
    {{name: rule for name, rule in vars(decls).items() if isinstance(rule, Rule) and rule.name != "train_lm"}}
)
'''


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1_000, help="train_lm targets of the sweep (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each command (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, help="marinbuild --jobs (default: %(default)s)")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="generate and build in this new or empty dir and keep it (default: a temp dir, removed afterwards)",
    )
    parser.add_argument("--json-out", type=Path, help="also write results as JSON here")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.repeat < 1:
        parser.error("--runs and --repeat must be at least 1")
    return args


def write_sweep(root: Path, runs: int, rules: list[str]) -> Path:
    """The sweep's workspace at `root`: its settings, the lm macros, //exp's BUILD file."""
    (root / "rules" / "lm").mkdir(parents=True)
    shutil.copyfile(REPO / "rules" / "lm" / "lm.star", root / "rules" / "lm" / "lm.star")
    (root / "marinbuild.toml").write_text(f"rules = {rules!r}\n".replace("'", '"'))
    (root / "exp").mkdir()
    (root / "exp" / "BUILD.marin").write_text(BUILD.format(runs=runs))
    return root


def _marinbuild(marinbuild: str, workspace: Path, *args: str, env: dict[str, str] | None = None) -> benchlib.Run:
    return benchlib.run_timed([marinbuild, "--workspace", workspace, *args], cwd=workspace, extra_env=env)


def timed(
    marinbuild: str, workspace: Path, args: Sequence[str], repeat: int, cold: bool, env: dict[str, str] | None = None
) -> dict:
    """`repeat` runs of `marinbuild ARGS` (`cold`: the machine-local memos deleted first)."""
    runs = []
    for _ in range(repeat):
        if cold:
            shutil.rmtree(workspace / ".marinbuild", ignore_errors=True)
        runs.append(_marinbuild(marinbuild, workspace, *args, env=env))
    return {
        "s": benchlib.summarize([run.seconds for run in runs]),
        "cpu_s": benchlib.summarize([run.cpu_s for run in runs]),
        "peak_rss_mib": max(run.peak_rss_mib for run in runs),
        "lines": len(runs[-1].stdout.splitlines()),
    }


def measure_unbuilt(marinbuild: str, root: Path, args: argparse.Namespace) -> dict:
    """Dry run and query of the sweep as written, and query of as many genrules."""
    sweep = write_sweep(root / "sweep", args.runs, REAL_RULES)
    genrules = root / "genrules"
    targets = args.runs + UPSTREAM
    gen.write_marinbuild(gen.generate_dag(targets, max(1, targets // 20), gen.DEFAULT_SEED), genrules)
    found: dict = {}
    for state, cold in (("cold", True), ("warm", False)):
        found[f"dry_run_{state}"] = timed(marinbuild, sweep, ["build", "--dry-run", "//exp:all"], args.repeat, cold)
        found[f"query_{state}"] = timed(marinbuild, sweep, ["query", "deps(//exp:all)"], args.repeat, cold)
        found[f"genrules_query_{state}"] = timed(marinbuild, genrules, ["query", "deps(//...)"], args.repeat, cold)
        for name in ("query", "genrules_query"):
            if found[f"{name}_{state}"]["lines"] != targets:
                raise benchlib.BenchError(f"{name} printed {found[f'{name}_{state}']['lines']} labels, not {targets}")
        benchlib.log(
            f"{state}: dry run {found[f'dry_run_{state}']['s']['median']:.2f} s, "
            f"query {found[f'query_{state}']['s']['median']:.2f} s, "
            f"genrules' query {found[f'genrules_query_{state}']['s']['median']:.2f} s"
        )
    return found


def measure_built(marinbuild: str, root: Path, args: argparse.Namespace) -> dict:
    """One real training, then the stand-in sweep built, its no-ops and its compare."""
    sweep = root / "sweep"
    benchlib.log("building one real training of the sweep: //exp:run_0")
    template = _marinbuild(marinbuild, sweep, "build", "//exp:run_0", "--jobs", str(args.jobs), "--json")
    targets = benchlib.parse_trailing_json(template.stdout)["targets"]
    [trained] = [target["output"] for target in targets if target["label"] == "//exp:run_0"]
    stand_in = write_sweep(root / "stand-in", args.runs, STAND_IN_RULES)
    (stand_in / "sweep_rules.py").write_text(STAND_IN.format(trained=trained))
    total = args.runs + UPSTREAM
    benchlib.log(f"building the stand-in sweep: {total} targets")
    cold, report = benchlib.marinbuild_build(marinbuild, stand_in, args.jobs)
    benchlib.check_counts(report, total, built=total)
    first, report = benchlib.marinbuild_build(marinbuild, stand_in, args.jobs)
    benchlib.check_counts(report, total, built=0)
    found: dict = {
        "template_build_s": template.seconds,
        "cold_build_s": cold.seconds,
        "first_noop": {"s": first.seconds, "cpu_s": first.cpu_s, "peak_rss_mib": first.peak_rss_mib},
    }
    build = ["build", "//exp:all", "--jobs", str(args.jobs)]
    found["uncertified_noop"] = timed(marinbuild, stand_in, build, args.repeat, False, UNCERTIFIED)
    found["certified_noop"] = timed(marinbuild, stand_in, build, args.repeat, False)
    found["compare"] = timed(marinbuild, stand_in, ["compare", "//exp:all"], args.repeat, False)
    if found["compare"]["lines"] < args.runs:
        raise benchlib.BenchError(f"compare printed {found['compare']['lines']} lines for {args.runs} runs")
    benchlib.log(
        f"no-ops: first {first.seconds:.2f} s, uncertified {found['uncertified_noop']['s']['median']:.2f} s, "
        f"certified {found['certified_noop']['s']['median']:.2f} s; compare {found['compare']['s']['median']:.2f} s"
    )
    return found


def ratios(results: dict) -> dict[str, float]:
    """The sweep's query over the genrules' (same number of targets: per target alike)."""
    unbuilt = results["unbuilt"]
    return {
        f"sweep_query/genrules_query {state}": unbuilt[f"query_{state}"]["s"]["median"]
        / unbuilt[f"genrules_query_{state}"]["s"]["median"]
        for state in ("cold", "warm")
    }


def print_report(results: dict) -> None:
    unbuilt, built, runs = results["unbuilt"], results["built"], results["config"]["runs"]
    rows = [
        [name, unbuilt[f"{key}_cold"]["s"]["median"], unbuilt[f"{key}_warm"]["s"]["median"]]
        for name, key in (
            ("build --dry-run //exp:all", "dry_run"),
            ("query 'deps(//exp:all)'", "query"),
            ("genrules: query 'deps(//...)'", "genrules_query"),
        )
    ]
    rows += [
        ["first no-op (stand-in)", built["first_noop"]["s"], None],
        ["uncertified no-op (stand-in)", None, built["uncertified_noop"]["s"]["median"]],
        ["certified no-op (stand-in)", None, built["certified_noop"]["s"]["median"]],
        ["compare //exp:all (stand-in)", None, built["compare"]["s"]["median"]],
    ]
    print(f"{runs} train_lm runs, {runs + UPSTREAM} targets")
    benchlib.print_table(["command", "cold s", "warm s"], rows)
    for name, value in results["ratios"].items():
        print(f"{name} (per target, same count): {value:.3g}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict = {"benchmark": "sweep", "config": benchlib.jsonable(vars(args)), "host": benchlib.host_info()}
    try:
        marinbuild = benchlib.find_marinbuild()
        with benchlib.work_dir(args.workdir) as root:
            results["unbuilt"] = measure_unbuilt(marinbuild, root, args)
            results["built"] = measure_built(marinbuild, root, args)
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
