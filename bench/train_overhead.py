"""Training overhead: the same Levanter runs through `marinbuild` and called directly, on
whatever accelerator JAX finds (CPU here; run it on a GPU or TPU host as it is).

The runs are the examples' own recipes, read (`marinbuild query --output json`) from
copies of experiments/tutorial and experiments/posttrain in a fresh workspace:

- `dense`: the tutorial's nano Llama (`train_lm`, //experiments/tutorial:model);
- `moe`: the mixture of experts of the same size beside it (`train_lm` of a Mixtral,
  //experiments/posttrain:moe);
- `sft`: LoRA fine-tuning of the tutorial's model, exported in Hugging Face format, on the
  chat set (`sft_lm`, //experiments/posttrain:chat).

Their data (the tutorial's token caches, the chat set) and the base the fine-tuning starts
from (the tutorial's recipe, trained for the same steps and exported by `export_hf`) are
built once, untimed. Then, per repetition and run, it times `marinbuild build //bench:RUN`
(the whole command: start-up, loading, keys, the step's worker process, hashing and
publishing the outputs; for `sft`, merging the adapters too) and a plain Python process that
builds the same Levanter config with the rule's own code and calls the same Levanter entry
point (`benchlib.levanter_directly`: `train_lm.main`, `lora_lm.main`), the order
alternating from one repetition to the next. Each repetition uses a new seed (from 1: the
base has the examples' 0), the same both ways, so marinbuild never finds the run in its
cache; each way keeps a JAX compilation cache of its own for the whole benchmark
(marinbuild's `.marinbuild/jax-cache`, a directory of the direct runs'), so that both
compile in the first repetition and load their programs in the next. The ratio of the
medians, per run, is marinbuild's cost on top of Levanter's (target: at most 1.02); so is
the ratio against the direct runs without their teardown after Levanter's entry point
returned (Python joining threads, atexit handlers), which marinbuild's worker skips. It
also prints the devices JAX trained on and the training's throughput both ways (tokens/s,
the median over the steps after the first, which compiles), and their ratio.

Usage: ``python bench/train_overhead.py [--runs dense,moe,sft] [--steps N] [--repeats R] [--workdir DIR]
[--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

import benchlib

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = ("experiments/tutorial/BUILD.marin", "experiments/posttrain/BUILD.marin")
PKG = "//bench"
# Each run timed: the example's target whose recipe it has.
RUNS = {
    "dense": "//experiments/tutorial:model",
    "moe": "//experiments/posttrain:moe",
    "sft": "//experiments/posttrain:chat",
}
# The fine-tuning's base: the tutorial's model trained for the benchmark's steps, exported.
BASE, BASE_HF = "base", "base_hf"
EXAMPLE_BASE_HF = "//experiments/posttrain:dense_hf"
# The attributes of every target that say where or how it runs, never what: not in a recipe.
WHERE_AND_HOW = ("name", "tags", "description", "resources", "timeout")
DIRECT_CACHE = "direct-jax-cache"
CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"


def training_parser(doc: str) -> argparse.ArgumentParser:
    """The options of the benchmarks that train the examples' models (this one,
    bench/compile_cache.py, bench/hf_export.py), described by `doc`'s first paragraph."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--steps", type=int, help="training steps of every run (default: each example's own)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each (default: %(default)s)")
    parser.add_argument("--workdir", type=Path, help="work in this new or empty dir and keep it")
    parser.add_argument("--json-out", type=Path, help="also write the results here")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = training_parser(__doc__)
    parser.add_argument("--runs", default=",".join(RUNS), help="the runs to time (default: %(default)s)")
    options = parser.parse_args(argv)
    unknown = sorted(set(options.runs.split(",")) - set(RUNS))
    if unknown:
        parser.error(f"--runs: no run {', '.join(unknown)} (the runs: {', '.join(RUNS)})")
    return options


def examples_workspace(root: Path) -> Path:
    """A workspace under `root` with the repository's rule modules, //rules/lm:lm.star, copies
    of the examples whose recipes and data the benchmarks use, and an empty //bench."""
    ws = root / "ws"
    rules = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["marinbuild"]["rules"]
    (ws / "rules" / "lm").mkdir(parents=True)
    (ws / "marinbuild.toml").write_text(f"rules = {json.dumps(rules)}\n")
    shutil.copy(REPO / "rules" / "lm" / "lm.star", ws / "rules" / "lm" / "lm.star")
    for example in EXAMPLES:
        (ws / example).parent.mkdir(parents=True)
        shutil.copy(REPO / example, ws / example)
    write_bench(ws, "")
    return ws


def write_bench(ws: Path, targets: str) -> None:
    (ws / "bench").mkdir(exist_ok=True)
    (ws / "bench" / "BUILD.marin").write_text(targets)


def marinbuild(ws: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """What `marinbuild --workspace WS ARGS` prints."""
    done = subprocess.run(
        [sys.executable, "-m", "marinbuild", "--workspace", str(ws), *args],
        cwd=ws,
        capture_output=True,
        text=True,
        env=None if env is None else dict(env),
    )
    if done.returncode != 0:
        raise benchlib.BenchError(f"marinbuild {' '.join(args)} failed:\n{done.stderr[-benchlib.ERROR_TAIL_CHARS :]}")
    return done.stdout


def build(ws: Path, *labels: str, env: Mapping[str, str] | None = None) -> dict[str, Path]:
    """Build `labels`; the output directory of each target built or found."""
    built = json.loads(marinbuild(ws, "build", "--json", *labels, env=env))
    return {item["label"]: Path(item["output"]) for item in built["targets"]}


def recipe(ws: Path, label: str) -> tuple[str, dict]:
    """The rule of `label` and its effective attributes (defaults filled in, labels
    absolute), but those that say where or how it runs."""
    found = json.loads(marinbuild(ws, "query", label, "--output", "json"))
    assert len(found) == 1, found
    attrs = {name: value for name, value in found[0]["attributes"].items() if name not in WHERE_AND_HOW}
    return found[0]["kind"].removesuffix(" rule"), attrs


def with_steps(attrs: dict, steps: int | None, seed: int) -> dict:
    """A training's attributes with another seed and, given `steps`, that many steps (its
    evaluation and checkpoint intervals at most that)."""
    trainer = dict(attrs["trainer"])
    if steps is not None:
        trainer = {
            **trainer,
            "steps": steps,
            **{name: min(trainer[name], steps) for name in ("eval_interval", "checkpoint_interval") if trainer[name]},
        }
    return {**attrs, "trainer": trainer, "seed": seed}


def target(rule: str, name: str, attrs: Mapping[str, object]) -> str:
    """A target's declaration in a BUILD file (Python's repr of JSON values is Starlark).
    Attributes that are None are left out, as a recipe `marinbuild query` prints shows an
    attribute left unset (some, `init_step`, refuse an explicit None)."""
    fields = "".join(f"    {field} = {value!r},\n" for field, value in attrs.items() if value is not None)
    return f"{rule}(\n    name = {name!r},\n{fields})\n"


def base_targets(ws: Path, steps: int | None) -> str:
    """The fine-tuning's base: the tutorial's recipe for `steps`, and its export."""
    _rule, dense = recipe(ws, RUNS["dense"])
    return target("train_lm", BASE, with_steps(dense, steps, dense["seed"])) + target(
        "export_hf", BASE_HF, {"model": f"{PKG}:{BASE}"}
    )


def measured(ws: Path, label: str) -> dict:
    """What the attempt that built `label` measured (its devices and throughput)."""
    return json.loads(marinbuild(ws, "show", "--json", label))["measured"]


def main() -> None:
    options = parse_args()
    with benchlib.work_dir(options.workdir) as root:  # removed afterwards unless --workdir
        run_benchmark(options, root)


def run_benchmark(options: argparse.Namespace, root: Path) -> None:
    ws = examples_workspace(root)
    runs = options.runs.split(",")
    recipes = {run: recipe(ws, RUNS[run]) for run in runs}
    base = base_targets(ws, options.steps)
    write_bench(ws, base)
    benchlib.log("building the data and the fine-tuning's base (untimed)")
    data = {label for _rule, attrs in recipes.values() for label in _inputs(attrs)} - {EXAMPLE_BASE_HF}
    inputs = {str(label): str(path) for label, path in build(ws, *sorted(data), f"{PKG}:{BASE_HF}").items()}
    marinbuild_env = {name: value for name, value in os.environ.items() if name != CACHE_ENV}
    direct_env = {CACHE_ENV: str(root / DIRECT_CACHE)}

    times: dict[str, dict[str, list[float]]] = {run: {"marinbuild": [], "direct": []} for run in runs}
    rates: dict[str, dict[str, list[float]]] = {run: {"marinbuild": [], "direct": []} for run in runs}
    teardowns: dict[str, list[float]] = {run: [] for run in runs}  # the direct runs'
    devices = set()
    for repeat in range(options.repeats):
        seed = 1 + repeat  # never the examples' seed 0: the fine-tuning's base has it
        declared = {run: _declared(rule, attrs, options.steps, seed) for run, (rule, attrs) in recipes.items()}
        write_bench(ws, base + "".join(target(rule, run, attrs) for run, (rule, attrs) in declared.items()))
        for run in runs:
            label = f"{PKG}:{run}"
            rule, attrs = recipe(ws, label)  # effective, as the step gets them
            if attrs != declared[run][1]:
                raise benchlib.BenchError(f"{label} is not the recipe of {RUNS[run]}: {attrs} != {declared[run][1]}")
            for way in ("marinbuild", "direct") if repeat % 2 == 0 else ("direct", "marinbuild"):
                if way == "marinbuild":
                    seconds, device, rate = _through_marinbuild(ws, label, marinbuild_env)
                else:
                    seconds, device, rate, teardown = _directly(
                        rule, attrs, inputs, root / f"direct-{run}-{seed}", direct_env
                    )
                    teardowns[run].append(teardown)
                times[run][way].append(seconds)
                rates[run][way].append(rate)
                devices.add(device)
            benchlib.log(
                f"{run}, seed {seed}: marinbuild {times[run]['marinbuild'][-1]:.1f} s, "
                f"direct {times[run]['direct'][-1]:.1f} s"
            )
    report(options, runs, times, rates, teardowns, devices)


def _through_marinbuild(ws: Path, label: str, env: Mapping[str, str]) -> tuple[float, str, float]:
    """`marinbuild build LABEL` as a whole command: its seconds, and the devices and
    tokens/s its step's attempt measured."""
    started = time.perf_counter()
    build(ws, label, env=env)
    seconds = time.perf_counter() - started
    shown = measured(ws, label)
    return seconds, shown["devices"], shown["tokens_per_s"]


def _directly(
    rule: str, attrs: dict, inputs: Mapping[str, str], run_dir: Path, env: dict[str, str]
) -> tuple[float, str, float, float]:
    """The same run, Levanter's entry point called directly: its seconds, devices, tokens/s,
    and the seconds of the process's teardown after the entry point returned."""
    done = benchlib.levanter_directly(rule, attrs, inputs, run_dir, extra_env=env)
    shutil.rmtree(run_dir)  # its checkpoints: a few MB a run
    return done.seconds, done.report["devices"], done.report["tokens_per_s"], done.teardown_s


def _inputs(attrs: Mapping[str, object]) -> list[str]:
    """The labels a training reads: its data (one target or a mixture), and its base."""
    data = attrs["data"]
    labels = list(data) if isinstance(data, dict) else [data]
    return [*labels, *([attrs["model"]] if isinstance(attrs.get("model"), str) else [])]


def _declared(rule: str, attrs: dict, steps: int | None, seed: int) -> tuple[str, dict]:
    """A run of the benchmark: the example's recipe for `steps` with `seed`, a fine-tuning
    from the benchmark's base."""
    declared = with_steps(attrs, steps, seed)
    if rule == "sft_lm":
        declared["model"] = f"{PKG}:{BASE_HF}"
    return rule, declared


def report(
    options: argparse.Namespace,
    runs: Sequence[str],
    times: Mapping[str, Mapping[str, list[float]]],
    rates: Mapping[str, Mapping[str, list[float]]],
    teardowns: Mapping[str, list[float]],
    devices: set[str],
) -> None:
    """The table, and its JSON. Besides the ratio of the whole commands, the ratio against the
    direct runs without their teardown (Python's, after Levanter's entry point returned:
    threads joined, atexit handlers), which marinbuild's worker skips by exiting once its
    outputs are written: what marinbuild costs on top of Levanter's work alone."""
    worked = {
        run: statistics.median(t - down for t, down in zip(times[run]["direct"], teardowns[run], strict=True))
        for run in runs
    }
    medians = {run: {way: statistics.median(values) for way, values in times[run].items()} for run in runs}
    rate_medians = {run: {way: statistics.median(values) for way, values in rates[run].items()} for run in runs}
    result = {
        "steps": options.steps,
        "repeats": options.repeats,
        "devices": sorted(devices),
        "runs": {
            run: {
                "recipe": RUNS[run],
                "seconds": times[run],
                "median_s": medians[run],
                "ratio": medians[run]["marinbuild"] / medians[run]["direct"],
                "direct_teardown_s": teardowns[run],
                "ratio_without_teardown": medians[run]["marinbuild"] / worked[run],
                "tokens_per_s": rates[run],
                "tokens_per_s_ratio": rate_medians[run]["marinbuild"] / rate_medians[run]["direct"],
            }
            for run in runs
        },
    }
    print(f"devices: {', '.join(sorted(devices))}")
    print(
        f"| run | marinbuild, median of {options.repeats} | runs | direct, median | runs | marinbuild / direct "
        "| direct's teardown | marinbuild / direct without it | tokens/s, marinbuild / direct |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    for run in runs:
        cells = [
            f"{medians[run][way]:.2f} s | {', '.join(f'{t:.2f}' for t in times[run][way])}"
            for way in ("marinbuild", "direct")
        ]
        figures = result["runs"][run]
        print(
            f"| {run} ({RUNS[run]}) | {' | '.join(cells)} | {figures['ratio']:.3f} | "
            f"{', '.join(f'{t:.1f}' for t in teardowns[run])} s | {figures['ratio_without_teardown']:.3f} | "
            f"{rate_medians[run]['marinbuild']:,.0f} / {rate_medians[run]['direct']:,.0f} "
            f"({figures['tokens_per_s_ratio']:.3f}) |"
        )
    if options.json_out:
        benchlib.write_json(options.json_out, result)


if __name__ == "__main__":
    main()
