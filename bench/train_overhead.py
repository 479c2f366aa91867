"""Training overhead: the same Levanter run through `marinbuild` and called directly, on
whatever accelerator JAX finds (CPU here; run it on a GPU or TPU host as it is).

Builds the tutorial's data (corpus, tokenizer, token caches) once, untimed, in a fresh
workspace. Then, alternating, it times `marinbuild build :model` (the whole command:
start-up, loading, keys, the step's worker process, hashing and publishing the outputs)
and a plain Python process that builds the identical `TrainLmConfig` and calls
`levanter.main.train_lm.main` (start-up, imports, training). Each repetition uses a new
seed, the same in both, so marinbuild never finds the run in its cache. The ratio of
the medians is marinbuild's cost on top of Levanter's (target: at most 1.05). It also
prints the devices JAX trained on and the training's throughput both ways (tokens/s, the
median over the steps after the first, which compiles), and their ratio.

Usage: ``python bench/train_overhead.py [--steps N] [--repeats R] [--workdir DIR] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import benchlib

REPO = Path(__file__).resolve().parents[1]
CONFIG = 'rules = ["rules.data", "rules.tokenizer", "rules.token_caches", "rules.lm", "rules.hf_checkpoints"]\n'
# The tutorial's data and model (experiments/tutorial/BUILD.marin); the training length
# is a parameter.
DATA = """
load("//rules:lm.star", "llama_nano")
python_corpus(name = "corpus", sample_count = 2000, validation_fraction = 0.02)
bpe_tokenizer(name = "tokenizer", data = ":corpus", vocab_size = 2048)
tokenize(name = "tokens", data = ":corpus", tokenizer = ":tokenizer")
"""
OPTIMIZER = {"learning_rate": 3e-3, "weight_decay": 0.1, "warmup": 0.05}

# Run by the direct measurement in its own process: build the rule's Levanter config and
# call Levanter, nothing else.
DIRECT = """
import json, sys
from pathlib import Path
from rules import levanter_lm  # first: it keeps Hugging Face and wandb offline
from levanter.main import train_lm
attrs, tokens, scratch, tmp = json.loads(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
sets, tokenizer = levanter_lm.tokenized_sets({attrs["data"]: str(tokens)}, tmp)
config = levanter_lm.train_config(attrs, sets, tokenizer, scratch, tmp)
train_lm.main(config)
import jax, statistics
rows = levanter_lm.read_metrics(Path(config.trainer.log_dir) / levanter_lm.TIMING_FILE)
rates = [row["throughput/tokens_per_second"] for row in rows if row.get("throughput/tokens_per_second")][1:]
print(json.dumps({"devices": f"{jax.device_count()} x {jax.devices()[0].device_kind}",
                  "tokens_per_s": statistics.median(rates) if rates else None}))
"""


def parse_args(argv: Sequence[str] | None = None, doc: str = __doc__) -> argparse.Namespace:
    """The options of this benchmark, and of bench/compile_cache.py (which trains the same
    run the same number of times), described by `doc`'s first paragraph."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=120, help="training steps (default: %(default)s, the tutorial's)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each (default: %(default)s)")
    parser.add_argument("--workdir", type=Path, help="work in this new or empty dir and keep it")
    parser.add_argument("--json-out", type=Path, help="also write the results here")
    return parser.parse_args(argv)


def attrs(steps: int, seed: int) -> dict:
    return {
        "data": "//exp:tokens",
        "model": {
            "hidden_dim": 64,
            "intermediate_dim": 256,
            "num_layers": 2,
            "num_heads": 4,
            "num_kv_heads": 4,
            "seq_len": 128,
        },
        "optimizer": OPTIMIZER,
        "trainer": {"steps": steps, "batch_size": 32, "eval_interval": steps // 2, "checkpoint_interval": steps // 4},
        "seed": seed,
    }


def model_target(values: dict) -> str:
    return f"""
train_lm(
    name = "model",
    data = ":tokens",
    model = {json.dumps(values["model"])},
    optimizer = {json.dumps(values["optimizer"])},
    trainer = {json.dumps(values["trainer"])},
    seed = {values["seed"]},
)
"""


def marinbuild(ws: Path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "marinbuild", "--workspace", str(ws), "build", "--json", *args],
        cwd=ws,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise benchlib.BenchError(f"marinbuild failed:\n{done.stderr[-benchlib.ERROR_TAIL_CHARS :]}")
    return json.loads(done.stdout)


def direct(command: list[str], cwd: Path) -> dict:
    """The direct run's devices and throughput (the last line it prints)."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise benchlib.BenchError(f"the direct run failed:\n{done.stderr[-benchlib.ERROR_TAIL_CHARS :]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measured(ws: Path) -> dict:
    """What the attempt that built //exp:model measured (its devices and throughput)."""
    done = subprocess.run(
        [sys.executable, "-m", "marinbuild", "--workspace", str(ws), "show", "--json", "//exp:model"],
        cwd=ws,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)["measured"]


def tutorial_workspace(root: Path) -> Path:
    """A workspace under `root` with //rules:lm.star and the tutorial's data in //exp."""
    ws = root / "ws"
    (ws / "rules").mkdir(parents=True)
    (ws / "rules" / "BUILD.marin").write_text("")
    shutil.copy(REPO / "rules" / "lm.star", ws / "rules" / "lm.star")
    (ws / "exp").mkdir()
    (ws / "marinbuild.toml").write_text(CONFIG)
    (ws / "exp" / "BUILD.marin").write_text(DATA)
    return ws


def timed(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def main() -> None:
    options = parse_args()
    with benchlib.work_dir(options.workdir) as root:  # removed afterwards unless --workdir
        run_benchmark(options, root)


def run_benchmark(options: argparse.Namespace, root: Path) -> None:
    ws = tutorial_workspace(root)
    benchlib.log("building the data (untimed)")
    tokens = Path(marinbuild(ws, "//exp:tokens")["targets"][-1]["output"])

    times: dict[str, list[float]] = {"marinbuild": [], "direct": []}
    rates: dict[str, list[float]] = {"marinbuild": [], "direct": []}
    devices = set()
    for seed in range(options.repeats):
        values = attrs(options.steps, seed)
        (ws / "exp" / "BUILD.marin").write_text(DATA + model_target(values))
        times["marinbuild"].append(timed(lambda: marinbuild(ws, "//exp:model")))
        through_marinbuild = measured(ws)
        devices.add(through_marinbuild["devices"])
        rates["marinbuild"].append(through_marinbuild["tokens_per_s"])
        run_dir = root / f"direct-{seed}"
        for part in ("scratch", "tmp"):
            (run_dir / part).mkdir(parents=True)
        command = [
            sys.executable,
            "-c",
            DIRECT,
            json.dumps(values),
            str(tokens),
            str(run_dir / "scratch"),
            str(run_dir / "tmp"),
        ]
        started = time.perf_counter()
        directly = direct(command, run_dir / "tmp")
        times["direct"].append(time.perf_counter() - started)
        devices.add(directly["devices"])
        rates["direct"].append(directly["tokens_per_s"])
        benchlib.log(f"seed {seed}: marinbuild {times['marinbuild'][-1]:.1f} s, direct {times['direct'][-1]:.1f} s")

    medians = {name: statistics.median(values) for name, values in times.items()}
    rate_medians = {name: statistics.median(values) for name, values in rates.items()}
    result = {
        "steps": options.steps,
        "repeats": options.repeats,
        "devices": sorted(devices),
        "seconds": times,
        "median_s": medians,
        "ratio": medians["marinbuild"] / medians["direct"],
        "tokens_per_s": rates,
        "tokens_per_s_ratio": rate_medians["marinbuild"] / rate_medians["direct"],
    }
    print(f"devices: {', '.join(sorted(devices))}")
    print(f"| run | median of {options.repeats} | runs | tokens/s (median) |\n| --- | --- | --- | --- |")
    for name in times:
        runs = ", ".join(f"{t:.2f}" for t in times[name])
        print(f"| {name} | {medians[name]:.2f} s | {runs} | {rate_medians[name]:,.0f} |")
    print(f"\nmarinbuild / direct: {result['ratio']:.3f} (wall time), {result['tokens_per_s_ratio']:.3f} (tokens/s)")
    if options.json_out:
        benchlib.write_json(options.json_out, result)


if __name__ == "__main__":
    main()
