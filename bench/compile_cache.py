"""Time to first step with JAX's persistent compilation cache: a sweep's second run.

Builds the tutorial's data (corpus, tokenizer, token caches) once, untimed, in a fresh
workspace holding a copy of the tutorial (bench/train_overhead.py's). Then, for each
repetition, it trains the tutorial's model (its recipe, //experiments/tutorial:model)
three times with `marinbuild build //bench:model`, each with a learning rate of its own
(so marinbuild never finds the run in its cache) and the same shapes:

- no cache: JAX_COMPILATION_CACHE_DIR set empty, which turns JAX's cache off: every
  program is compiled, as before marinbuild kept a cache (the baseline; first in even
  repetitions, last in odd ones);
- cold cache: marinbuild's cache directory (`.marinbuild/jax-cache`) emptied first: every
  program is compiled, and written to the cache;
- warm cache: right after the cold run, another learning rate: the programs are loaded.

Each training's `time_to_first_step_s` (from its step's process starting to its first
step done), `cpu_to_first_step_s` (the CPU time that process spent until then, which
other work on the machine does not inflate; both recorded by the attempt, `marinbuild
show --json`) and the whole command's wall time are taken; the figures are the medians'
ratios against the no-cache runs.

Usage: ``python bench/compile_cache.py [--steps N] [--repeats R] [--workdir DIR] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import benchlib
from train_overhead import (
    PKG,
    RUNS,
    examples_workspace,
    marinbuild,
    recipe,
    target,
    training_parser,
    with_steps,
    write_bench,
)

VARIANTS = ("no cache", "cold cache", "warm cache")
CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return training_parser(__doc__).parse_args(argv)


def marinbuild_json(ws: Path, env: dict[str, str], *args: str) -> dict:
    return json.loads(marinbuild(ws, *args, env=env))


def train(ws: Path, env: dict[str, str], values: dict) -> dict[str, float]:
    """Train one model; its time and CPU time to first step, and the command's wall time."""
    write_bench(ws, target("train_lm", "model", values))
    started = time.perf_counter()
    built = marinbuild_json(ws, env, "build", "--json", f"{PKG}:model")
    wall = time.perf_counter() - started
    if built["targets"][-1]["status"] != "built":
        raise benchlib.BenchError(f"the model was not trained: {built['targets'][-1]}")
    measured = marinbuild_json(ws, env, "show", "--json", f"{PKG}:model")["measured"]
    return {
        "first_step_s": measured["time_to_first_step_s"],
        "first_step_cpu_s": measured["cpu_to_first_step_s"],
        "wall_s": wall,
    }


def main() -> None:
    options = parse_args()
    with benchlib.work_dir(options.workdir) as root:  # removed afterwards unless --workdir
        run_benchmark(options, root)


def run_benchmark(options: argparse.Namespace, root: Path) -> None:
    ws = examples_workspace(root)
    default_env = {name: value for name, value in os.environ.items() if name != CACHE_ENV}
    no_cache_env = {**default_env, CACHE_ENV: ""}  # empty: JAX keeps no cache
    _rule, tutorial = recipe(ws, RUNS["dense"])
    benchlib.log("building the data (untimed)")
    marinbuild_json(ws, default_env, "build", "--json", tutorial["data"])

    cache = ws / ".marinbuild" / "jax-cache"
    figures: dict[str, dict[str, list[float]]] = {
        variant: {"first_step_s": [], "first_step_cpu_s": [], "wall_s": []} for variant in VARIANTS
    }
    for repeat in range(options.repeats):
        runs = {}
        # The baseline first in even repeats, last in odd ones: a machine whose load drifts
        # favours neither side. The warm run always follows the cold one.
        order = VARIANTS if repeat % 2 == 0 else (*VARIANTS[1:], VARIANTS[0])
        for variant in order:
            index = VARIANTS.index(variant)
            values = with_steps(tutorial, options.steps, seed=0)
            # Another learning rate each time: another key, the same shapes.
            values["optimizer"] = {**values["optimizer"], "learning_rate": 1e-3 * (1 + repeat * len(VARIANTS) + index)}
            if variant == "cold cache":
                shutil.rmtree(cache, ignore_errors=True)
            runs[variant] = train(ws, no_cache_env if variant == "no cache" else default_env, values)
            for name, value in runs[variant].items():
                figures[variant][name].append(value)
        shown = ", ".join(
            f"{variant} {runs[variant]['first_step_s']:.1f} s ({runs[variant]['first_step_cpu_s']:.1f} s CPU)"
            for variant in VARIANTS
        )
        benchlib.log(f"repeat {repeat}: time to first step: {shown}")

    medians = {
        variant: {name: statistics.median(values) for name, values in figures[variant].items()} for variant in VARIANTS
    }
    baseline = medians["no cache"]
    ratios = {variant: {name: medians[variant][name] / baseline[name] for name in baseline} for variant in VARIANTS}
    result = {
        "steps": options.steps,
        "repeats": options.repeats,
        "seconds": figures,
        "median_s": medians,
        "ratio_to_no_cache": ratios,
        "cache_bytes": sum(path.stat().st_size for path in cache.rglob("*") if path.is_file()),
    }
    print(
        f"| run | time to first step, median of {options.repeats} | / no cache "
        "| CPU time to first step | / no cache | wall time of the build | / no cache |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for variant in VARIANTS:
        cells = [f"{medians[variant][name]:.1f} s | {ratios[variant][name]:.3f}" for name in baseline]
        print(f"| {variant} | {' | '.join(cells)} |")
    if options.json_out:
        benchlib.write_json(options.json_out, result)


if __name__ == "__main__":
    main()
