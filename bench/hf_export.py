"""What a Hugging Face export costs: inside every training (what train_lm did up to its
version 2), or as a step of its own, `export_hf`, for the runs whose export is wanted.

Builds the tutorial's data (corpus, tokenizer, token caches) once, untimed, in a fresh
workspace holding a copy of the tutorial (bench/train_overhead.py's). Then, per repetition
(a new seed each), it trains the tutorial's model (its recipe,
//experiments/tutorial:model) twice with Levanter called directly
(`benchlib.levanter_directly`: train_lm's `TrainLmConfig`, `levanter.main.train_lm.main`):
as train_lm does now, and with Levanter's HF export at the last step (`hf_save_path`), as
train_lm did; the order alternates. It reports each run's wall and CPU time (the process's
own, which other work on the machine does not inflate), their ratios, and the bytes of the
export against the checkpoint's.

Last, it trains the model through marinbuild (untimed), keeping a checkpoint for each
repetition but the last, and exports each kept state and the last step both ways,
alternating: `marinbuild build //bench:export_STEP`, an `export_hf` target, timed as a
whole command (start-up, loading, the step's process, Levanter's export, hashing and
publishing; target: under 10 s), and Levanter's export (`export_lm_to_hf.main`, as
export_hf calls it) in a plain process.

Usage: ``python bench/hf_export.py [--steps N] [--repeats R] [--workdir DIR] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import benchlib
from train_overhead import (
    PKG,
    RUNS,
    build,
    examples_workspace,
    marinbuild,
    recipe,
    target,
    training_parser,
    with_steps,
    write_bench,
)

VARIANTS = ("without export", "with export")
WAYS = ("marinbuild", "direct")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return training_parser(__doc__).parse_args(argv)


def _bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def _train(values: dict, inputs: dict[str, str], run_dir: Path, variant: str) -> dict:
    """Wall and CPU seconds of one direct training, and the bytes it wrote."""
    steps = values["trainer"]["steps"]
    scratch = run_dir / "scratch"
    export = {"hf_save_path": str(scratch / "hf"), "hf_save_steps": steps} if variant == "with export" else {}
    done = benchlib.levanter_directly("train_lm", values, inputs, run_dir, overrides=export)
    last = f"step-{steps - 1}"
    return {
        "wall_s": done.seconds,
        "cpu_s": done.cpu_s,
        "checkpoint_bytes": _bytes(scratch / "checkpoints" / last),
        "export_bytes": _bytes(scratch / "hf" / last) if export else 0,
    }


def main() -> None:
    options = parse_args()
    with benchlib.work_dir(options.workdir) as root:  # removed afterwards unless --workdir
        run_benchmark(options, root)


def export_steps(steps: int, repeats: int) -> list[int | None]:
    """The states exported: a kept one for each repetition but the last, then the last step."""
    return [*(steps * (index + 1) // repeats - 1 for index in range(repeats - 1)), None]


def run_benchmark(options: argparse.Namespace, root: Path) -> None:
    ws = examples_workspace(root)
    _rule, tutorial = recipe(ws, RUNS["dense"])
    benchlib.log("building the data (untimed)")
    inputs = {label: str(path) for label, path in build(ws, tutorial["data"]).items()}

    runs: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
    for seed in range(options.repeats):
        values = with_steps(tutorial, options.steps, seed)
        for variant in VARIANTS if seed % 2 == 0 else reversed(VARIANTS):
            runs[variant].append(_train(values, inputs, root / f"direct-{seed}-{variant.replace(' ', '-')}", variant))
        benchlib.log(f"seed {seed}: " + ", ".join(f"{v} {runs[v][-1]['wall_s']:.1f} s" for v in VARIANTS))

    values = with_steps(tutorial, options.steps, seed=0)
    points = export_steps(values["trainer"]["steps"], options.repeats)
    kept = [step for step in points if step is not None]
    exports = {step: f"export_{'last' if step is None else step}" for step in points}
    write_bench(
        ws,
        target("train_lm", "model", {**values, "keep_checkpoints": kept})
        + "".join(target("export_hf", name, {"model": ":model", "step": step}) for step, name in exports.items()),
    )
    model = f"{PKG}:model"
    benchlib.log(f"training {model} through marinbuild, keeping steps {kept} (untimed)")
    trained = build(ws, model)[model]
    exported: dict[str, list[float]] = {way: [] for way in WAYS}
    for index, (step, name) in enumerate(exports.items()):
        state = trained if step is None else marinbuild_where(ws, model, step)
        for way in WAYS if index % 2 == 0 else reversed(WAYS):
            if way == "marinbuild":
                started = time.perf_counter()
                build(ws, f"{PKG}:{name}")
                exported[way].append(time.perf_counter() - started)
            else:
                done = benchlib.levanter_directly("export_hf", {"model": model}, {model: str(state)}, root / name)
                exported[way].append(done.seconds)
        benchlib.log(f"{name}: marinbuild {exported['marinbuild'][-1]:.1f} s, direct {exported['direct'][-1]:.1f} s")
    report(options, runs, exported)


def marinbuild_where(ws: Path, label: str, step: int) -> Path:
    """The directory of the state `label` keeps at `step` (`marinbuild where --step`)."""
    return Path(marinbuild(ws, "where", "--step", str(step), label).strip())


def report(options: argparse.Namespace, runs: dict[str, list[dict]], exported: dict[str, list[float]]) -> None:
    medians = {v: {m: statistics.median(r[m] for r in runs[v]) for m in ("wall_s", "cpu_s")} for v in VARIANTS}
    with_export, without = runs["with export"][0], runs["without export"][0]
    export_medians = {way: statistics.median(seconds) for way, seconds in exported.items()}
    result = {
        "steps": options.steps,
        "repeats": options.repeats,
        "runs": runs,
        "median": medians,
        "ratio_with_export": {m: medians["with export"][m] / medians["without export"][m] for m in ("wall_s", "cpu_s")},
        "export_to_checkpoint_bytes": with_export["export_bytes"] / without["checkpoint_bytes"],
        "export_hf_s": exported,
        "export_hf_median_s": export_medians,
        "export_hf_ratio": export_medians["marinbuild"] / export_medians["direct"],
        "export_hf_to_training_wall": export_medians["marinbuild"] / medians["without export"]["wall_s"],
    }
    print(f"| training | wall, median of {options.repeats} | CPU, median | runs (wall) |\n| --- | --- | --- | --- |")
    for variant in VARIANTS:
        walls = ", ".join(f"{run['wall_s']:.1f}" for run in runs[variant])
        print(f"| {variant} | {medians[variant]['wall_s']:.1f} s | {medians[variant]['cpu_s']:.1f} s | {walls} |")
    ratios = result["ratio_with_export"]
    print(f"\nwith / without the export: {ratios['wall_s']:.3f} (wall), {ratios['cpu_s']:.3f} (CPU)")
    print(
        f"export {with_export['export_bytes']:,} bytes, checkpoint {without['checkpoint_bytes']:,} bytes "
        f"({result['export_to_checkpoint_bytes']:.2f})"
    )
    print(f"\n| export_hf | median of {len(exported['marinbuild'])} | runs |\n| --- | --- | --- |")
    for way in WAYS:
        print(f"| {way} | {export_medians[way]:.2f} s | {', '.join(f'{s:.2f}' for s in exported[way])} |")
    share = result["export_hf_to_training_wall"]
    print(
        f"\nmarinbuild / direct: {result['export_hf_ratio']:.3f}; marinbuild build :export_STEP "
        f"{export_medians['marinbuild']:.1f} s ({share:.2f} of a training's wall time)"
    )
    if options.json_out:
        benchlib.write_json(options.json_out, result)


if __name__ == "__main__":
    main()
