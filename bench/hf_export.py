"""What a Hugging Face export costs: inside every training (what train_lm did up to its
version 2), or as a step of its own, `export_hf`, for the runs whose export is wanted.

Builds the tutorial's data (corpus, tokenizer, token caches) once, untimed, in a fresh
workspace. Then, per repetition (a new seed each), it trains the tutorial's model twice in
a plain Python process that builds train_lm's `TrainLmConfig` and calls
`levanter.main.train_lm.main`: as train_lm does now, and with Levanter's HF export at the
last step (`hf_save_path`), as train_lm did; the order alternates. It reports each run's
wall and CPU time (the process's own, which other work on the machine does not inflate),
their ratios, and the bytes of the export against the checkpoint's. Last, it trains the
model through marinbuild (untimed) and times `marinbuild build :export`, an `export_hf` of
it, as a whole command (start-up, loading, the step's process, Levanter's export, hashing
and publishing).

Usage: ``python bench/hf_export.py [--steps N] [--repeats R] [--workdir DIR] [--json-out FILE]``.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import benchlib
from train_overhead import DATA, attrs, marinbuild, model_target, parse_args, tutorial_workspace

# One training, as train_lm builds it; with `hf` set, Levanter exports at the last step too.
DIRECT = """
import dataclasses, json, sys
from pathlib import Path
from rules import levanter_lm  # first: it keeps Hugging Face and wandb offline
from levanter.main import train_lm
attrs, hf = json.loads(sys.argv[1]), sys.argv[5]
tokens, scratch, tmp = (Path(argument) for argument in sys.argv[2:5])
sets, tokenizer = levanter_lm.tokenized_sets({attrs["data"]: str(tokens)}, tmp)
config = levanter_lm.train_config(attrs, sets, tokenizer, scratch, tmp)
if hf == "hf":
    config = dataclasses.replace(config, hf_save_path=str(scratch / "hf"), hf_save_steps=attrs["trainer"]["steps"])
train_lm.main(config)
"""
VARIANTS = ("without export", "with export")


def _bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def _train(values: dict, tokens: Path, run_dir: Path, variant: str) -> dict:
    """Wall and CPU seconds of one direct training, and the bytes it wrote."""
    for part in ("scratch", "tmp"):
        (run_dir / part).mkdir(parents=True)
    hf = "hf" if variant == "with export" else "-"
    command = [
        sys.executable,
        "-c",
        DIRECT,
        json.dumps(values),
        str(tokens),
        *(str(run_dir / p) for p in ("scratch", "tmp")),
        hf,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=run_dir / "tmp", capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise benchlib.BenchError(f"the direct run failed:\n{done.stderr[-benchlib.ERROR_TAIL_CHARS :]}")
    scratch = run_dir / "scratch"
    last = f"step-{values['trainer']['steps'] - 1}"
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "checkpoint_bytes": _bytes(scratch / "checkpoints" / last),
        "export_bytes": _bytes(scratch / "hf" / last) if hf == "hf" else 0,
    }


def main() -> None:
    options = parse_args(doc=__doc__)
    with benchlib.work_dir(options.workdir) as root:  # removed afterwards unless --workdir
        run_benchmark(options, root)


def run_benchmark(options, root: Path) -> None:
    ws = tutorial_workspace(root)
    benchlib.log("building the data (untimed)")
    tokens = Path(marinbuild(ws, "//exp:tokens")["targets"][-1]["output"])

    runs: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
    for seed in range(options.repeats):
        values = attrs(options.steps, seed)
        for variant in VARIANTS if seed % 2 == 0 else reversed(VARIANTS):
            runs[variant].append(_train(values, tokens, root / f"direct-{seed}-{variant.replace(' ', '-')}", variant))
        benchlib.log(f"seed {seed}: " + ", ".join(f"{v} {runs[v][-1]['wall_s']:.1f} s" for v in VARIANTS))

    values = attrs(options.steps, 0)
    (ws / "exp" / "BUILD.marin").write_text(
        DATA + model_target(values) + 'export_hf(name = "export", model = ":model")\n'
    )
    marinbuild(ws, "//exp:model")
    started = time.perf_counter()
    marinbuild(ws, "//exp:export")
    export_s = time.perf_counter() - started

    medians = {v: {m: statistics.median(r[m] for r in runs[v]) for m in ("wall_s", "cpu_s")} for v in VARIANTS}
    with_export, without = runs["with export"][0], runs["without export"][0]
    result = {
        "steps": options.steps,
        "repeats": options.repeats,
        "runs": runs,
        "median": medians,
        "ratio_with_export": {m: medians["with export"][m] / medians["without export"][m] for m in ("wall_s", "cpu_s")},
        "export_to_checkpoint_bytes": with_export["export_bytes"] / without["checkpoint_bytes"],
        "export_hf_s": export_s,
        "export_hf_to_training_wall": export_s / medians["without export"]["wall_s"],
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
    share = result["export_hf_to_training_wall"]
    print(f"marinbuild build :export (export_hf): {export_s:.1f} s ({share:.2f} of a training's wall time)")
    if options.json_out:
        benchlib.write_json(options.json_out, result)


if __name__ == "__main__":
    main()
