"""Shared helpers for the marinbuild benchmarks: finding tools, timing, reports.

The peers (DVC, Snakemake) live in their own virtualenv, named by
$MARINBUILD_BENCH_PEERS_VENV (default /work/bench-venv), so they never become
dependencies of marinbuild.  marinbuild itself is the executable named by
$MARINBUILD_BIN (default: ``marinbuild`` on PATH).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PEERS_VENV_VAR = "MARINBUILD_BENCH_PEERS_VENV"
DEFAULT_PEERS_VENV = "/work/bench-venv"
MARINBUILD_BIN_VAR = "MARINBUILD_BIN"
ERROR_TAIL_CHARS = 2000

# DVC: no anonymous usage reports (no network here, and it would add a
# daemon process to every command we time).
DVC_ENV = {"DVC_NO_ANALYTICS": "1"}
# Run every pipeline in the repo: the generator writes one dvc.yaml per package.
DVC_REPRO = ("repro", "--all-pipelines")
DVC_STAGE_RAN = "Running stage"
DVC_UP_TO_DATE = "Data and pipelines are up to date."
# Cold repro cost per stage on the 2-core dev machine (DVC 3.67, 1k-5k
# stages; it grows slowly with DAG size). Only used for the progress hint.
DVC_COLD_S_PER_STAGE = 0.06
# Snakemake 9 defaults cap local job starts at 100/s and use the ILP
# scheduler; together they make 1k trivial jobs take about twice as long, and
# neither is about correctness, so the peer gets its fast settings.
SNAKEMAKE_FAST = ("--scheduler", "greedy", "--max-jobs-per-timespan", "100000/1s")


class BenchError(RuntimeError):
    """A tool failed or did something other than the work being measured."""


def log(message: str) -> None:
    """Progress goes to stderr so stdout keeps only the result table."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def peers_venv() -> Path:
    return Path(os.environ.get(PEERS_VENV_VAR, DEFAULT_PEERS_VENV))


def add_raw_corpus_args(parser: argparse.ArgumentParser) -> None:
    """The options of the generated raw web corpus (rules/webdata/blocks/raw_corpus/) that the
    web-data benchmarks measure on."""
    parser.add_argument("--pages", type=int, default=3000, help="pages generated (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    parser.add_argument(
        "--stdlib-modules", type=int, help="stdlib modules feeding the text pool (default: all; 0: the docs alone)"
    )


def peer_python(module: str, packages: str) -> Path | None:
    """The peers venv's Python if `module` imports there (a library peer, never a dependency
    of the project), or None with how to install `packages` there."""
    python = peers_venv() / "bin" / "python"
    if os.access(python, os.X_OK) and subprocess.run([python, "-c", f"import {module}"]).returncode == 0:
        return python
    log(
        f"SKIPPING {module}: it does not import in {python}. Install it with: python3 -m venv "
        f"{peers_venv()} && {peers_venv()}/bin/pip install {packages}"
    )
    return None


def find_peer(name: str) -> Path | None:
    """Path of a peer executable in the peers venv, or None with a message."""
    path = peers_venv() / "bin" / name
    if os.access(path, os.X_OK):
        return path
    log(
        f"SKIPPING {name}: {path} not found. Install it with: "
        f"python3 -m venv {peers_venv()} && {peers_venv()}/bin/pip install dvc snakemake "
        f"(or point ${PEERS_VENV_VAR} at a venv that has it)"
    )
    return None


def find_marinbuild() -> str:
    """Resolve $MARINBUILD_BIN; marinbuild is the subject, so missing is fatal."""
    name = os.environ.get(MARINBUILD_BIN_VAR, "marinbuild")
    path = shutil.which(name)
    if path is None:
        raise BenchError(
            f"marinbuild executable {name!r} not found: activate /work/main/.venv, "
            f"set ${MARINBUILD_BIN_VAR}, or pass --skip-marinbuild"
        )
    return path


@dataclass(frozen=True)
class Run:
    """One finished command: wall-clock seconds, its captured output, the most memory it
    held at once (peak resident set, MiB) and the CPU time it used (user + system: what
    other work on the machine changes least)."""

    seconds: float
    stdout: str
    stderr: str
    peak_rss_mib: float = 0.0
    cpu_s: float = 0.0


def run_timed(cmd: Sequence[str | Path], cwd: Path, extra_env: dict[str, str] | None = None) -> Run:
    """Run ``cmd`` to completion, timing wall clock; raise BenchError on failure."""
    env = {**os.environ, **(extra_env or {})}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        _pid, status, usage = os.wait4(proc.pid, 0)  # the child's own peak memory, not the largest child's
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    returncode = proc.returncode
    if returncode != 0:
        raise BenchError(
            f"{' '.join(map(str, cmd))} failed with exit code {returncode} in {cwd}:\n"
            f"{(stdout + stderr)[-ERROR_TAIL_CHARS:]}"
        )
    return Run(seconds, stdout, stderr, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime)


def summarize(samples: Sequence[float]) -> dict[str, float | list[float]]:
    return {"median": statistics.median(samples), "min": min(samples), "samples": list(samples)}


@contextmanager
def work_dir(path: Path | None) -> Iterator[Path]:
    """Use ``path`` (created, kept afterwards) or a temp dir removed on exit.

    ``path`` must be new or empty: state left by an earlier run (DVC locks,
    caches) would turn a cold build into a partly warm one.
    """
    if path is not None:
        if path.exists() and any(path.iterdir()):
            raise BenchError(f"--workdir {path} is not empty")
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="marinbuild-bench-") as tmp:
        yield Path(tmp)


# --- marinbuild -------------------------------------------------------------


def parse_trailing_json(text: str) -> dict:
    """The JSON object printed last by ``marinbuild --json``.

    Tries each line that starts with ``{`` from the end, so log lines before
    the report (or a pretty-printed report) are both fine.
    """
    lines = text.splitlines(keepends=True)
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("{"):
            try:
                return json.loads("".join(lines[i:]))
            except json.JSONDecodeError:
                continue
    raise BenchError(f"no JSON report in marinbuild output:\n{text[-ERROR_TAIL_CHARS:]}")


def marinbuild_build(
    marinbuild: str, workspace: Path, jobs: int, extra_env: dict[str, str] | None = None
) -> tuple[Run, dict]:
    """``marinbuild build //...`` on ``workspace``; returns the run and its report."""
    cmd: list[str | Path] = [marinbuild, "--workspace", workspace, "build", "//...", "--jobs", str(jobs), "--json"]
    run = run_timed(cmd, cwd=workspace, extra_env=extra_env)
    return run, parse_trailing_json(run.stdout)


def check_counts(report: dict, targets: int, *, built: int) -> None:
    """Insist that exactly ``built`` targets ran and the rest were cache hits."""
    counts = report.get("counts", {})
    expected = {"built": built, "cached": targets - built, "failed": 0, "skipped": 0}
    actual = {key: counts.get(key) for key in expected}
    if actual != expected:
        raise BenchError(f"marinbuild counts {actual}, expected {expected}")


# --- Levanter called directly -------------------------------------------------------


@dataclass(frozen=True)
class DirectRun:
    """One run of a rule's Levanter entry point in a plain process (`levanter_directly`):
    its wall and CPU seconds, where it wrote its checkpoints or export (`scratch`), and what
    it reported (a training's devices and tokens/s)."""

    seconds: float
    cpu_s: float
    scratch: Path
    report: dict
    # Of `seconds`, those after the entry point returned: the interpreter's teardown (its
    # threads joined, atexit handlers), which marinbuild's worker skips (actions/execution/worker.py).
    teardown_s: float


def levanter_directly(
    rule: str,
    attrs: Mapping[str, object],
    inputs: Mapping[str, str],
    run_dir: Path,
    *,
    overrides: Mapping[str, object] | None = None,
    extra_env: dict[str, str] | None = None,
) -> DirectRun:
    """The baseline of the benchmarks of steps that run Levanter: a plain Python process
    that builds the step's Levanter config with the rule's own code (rules/common/levanter/,
    rules/posttrain/sft_lm.py) and calls Levanter's entry point on it — `train_lm` (a Llama or
    a Mixtral), `lora_lm` or `train_lm` from the base's weights (`sft_lm`),
    `export_lm_to_hf` (`export_hf`) — and nothing of marinbuild's: no CLI, loading, keys,
    worker process, hashing or publishing.

    `attrs` are the target's effective attributes (`marinbuild query --output json`),
    `inputs` the output directory of each label they name; `overrides` replaces fields of
    the entry point's config (`hf_save_path`). The run writes into `run_dir` (new): its
    checkpoints or export under `scratch/`, its working files in `tmp/`, where it runs."""
    scratch, tmp = run_dir / "scratch", run_dir / "tmp"
    scratch.mkdir(parents=True)
    tmp.mkdir()
    arguments = [json.dumps(value) for value in (attrs, inputs, overrides or {})]
    run = run_timed([sys.executable, __file__, rule, *arguments, str(scratch)], cwd=tmp, extra_env=extra_env)
    ended = time.time()
    report = json.loads(run.stdout.strip().splitlines()[-1])
    return DirectRun(run.seconds, run.cpu_s, scratch, report, max(0.0, ended - report.pop("returned_at")))


def _run_levanter(
    rule: str, attrs: dict, inputs: dict[str, str], overrides: dict[str, object], scratch: Path, tmp: Path
) -> dict:
    """The process `levanter_directly` starts: the rule's config, Levanter's entry point on
    it, and what it trained on. Imports Levanter, so it runs only there."""
    import rules.common.levanter.environment  # noqa: F401  (first: it keeps Hugging Face and wandb offline)

    import dataclasses

    import jax

    from rules.common.levanter.data import tokenized_sets
    from rules.common.levanter.hf_export import export
    from rules.common.levanter.metrics import read_rows
    from rules.common.levanter.trackers import TIMING_FILE
    from rules.common.levanter.training import Places, launch_train_lm

    places = Places(scratch / "out", scratch, tmp)
    if rule == "export_hf":
        export(inputs[attrs["model"]], scratch / "hf", tmp)
        return {}
    if rule == "train_lm":
        from rules.lm.train_lm import TrainRequest, train_config

        data = attrs["data"] if isinstance(attrs["data"], dict) else [attrs["data"]]
        sets, tokenizer = tokenized_sets({label: inputs[label] for label in data}, tmp)
        request = TrainRequest(attrs=attrs, data={label: inputs[label] for label in data}, places=places)
        config = dataclasses.replace(train_config(request, sets, tokenizer), **overrides)
        launch_train_lm(config)
    elif rule == "sft_lm":
        from rules.posttrain.sft_lm import FineTuneRequest, fine_tuning

        chats = {attrs["data"]: inputs[attrs["data"]]}
        prepared = fine_tuning(FineTuneRequest(attrs=attrs, model=inputs[attrs["model"]], data=chats, places=places))
        config = prepared.config
        prepared.launch()
    else:
        raise BenchError(f"no direct run of {rule}")
    timing = read_rows(Path(config.trainer.log_dir) / TIMING_FILE)
    rates = [row["throughput/tokens_per_second"] for row in timing if row.get("throughput/tokens_per_second")][1:]
    return {
        "devices": f"{jax.device_count()} x {jax.devices()[0].device_kind}",
        "tokens_per_s": statistics.median(rates) if rates else None,
    }


# --- DVC --------------------------------------------------------------------


def dvc_init(dvc: Path, repo: Path) -> None:
    """Initialise a DVC repo without git (git would only add .gitignore churn)."""
    run_timed([dvc, "init", "--no-scm", "--quiet"], cwd=repo, extra_env=DVC_ENV)
    run_timed([dvc, "config", "core.check_update", "false"], cwd=repo, extra_env=DVC_ENV)


def dvc_repro(dvc: Path, repo: Path) -> Run:
    return run_timed([dvc, *DVC_REPRO], cwd=repo, extra_env=DVC_ENV)


def dvc_repro_noop(dvc: Path, repo: Path) -> Run:
    """``dvc repro`` that must not run any stage."""
    run = dvc_repro(dvc, repo)
    if DVC_STAGE_RAN in run.stdout:
        raise BenchError(f"no-op dvc repro ran stages in {repo}:\n{run.stdout[-ERROR_TAIL_CHARS:]}")
    return run


def dvc_status(dvc: Path, repo: Path) -> Run:
    """``dvc status`` that must report everything up to date."""
    run = run_timed([dvc, "status"], cwd=repo, extra_env=DVC_ENV)
    if DVC_UP_TO_DATE not in run.stdout:
        raise BenchError(f"dvc status found changes in {repo}:\n{run.stdout[-ERROR_TAIL_CHARS:]}")
    return run


# --- Snakemake --------------------------------------------------------------


def snakemake_build(snakemake: Path, workdir: Path, cores: int) -> Run:
    return run_timed([snakemake, "--cores", str(cores), "--quiet", *SNAKEMAKE_FAST], cwd=workdir)


# --- checks and reporting -----------------------------------------------------


def existing_outputs(root: Path, paths: Sequence[str]) -> dict[str, Path]:
    """Peers report success loosely: map each expected output, insisting it exists."""
    files = {p: root / p for p in paths}
    missing = [p for p, f in files.items() if not f.is_file()]
    if missing:
        raise BenchError(f"{len(missing)} outputs missing under {root}, e.g. {missing[:3]}")
    return files


def outputs_digest(files: Mapping[str, Path]) -> str:
    """One hash over (name, content) of every output, to show tools did equal work."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0".encode())
        digest.update(files[name].read_bytes())
    return digest.hexdigest()


def marinbuild_output_files(report: dict, workspace_paths: Mapping[str, str]) -> dict[str, Path]:
    """Map workspace paths (``p3/t62.txt``) to the files marinbuild produced.

    ``workspace_paths`` maps labels to those paths; a report ``output`` is the
    output file itself or a directory holding the rule's outs.
    """
    files = {}
    for entry in report["targets"]:
        name = workspace_paths[entry["label"]]
        output = Path(entry["output"])
        files[name] = output / Path(name).name if output.is_dir() else output
    return files


def tool_version(cmd: Sequence[str | Path]) -> str:
    """First line of ``cmd``'s output, or 'unavailable' (informational only)."""
    try:
        proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120)
    except OSError:
        return "unavailable"
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    return lines[0] if proc.returncode == 0 and lines else "unavailable"


def jsonable(options: dict[str, object]) -> dict[str, object]:
    """argparse options as JSON values (paths become strings)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in options.items()}


def load_average() -> str:
    """The machine's load average (1, 5, 15 minutes) as `uptime` prints it, recorded before
    and after a run: the figures of a run on a loaded machine are the load's as much as the code's."""
    return " ".join(f"{load:.2f}" for load in os.getloadavg())


def host_info() -> dict[str, str | int | None]:
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()}


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Plain fixed-width table on stdout."""
    cells = [list(map(str, headers))] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        padded = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        print("  ".join(padded))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")
    log(f"wrote {path}")


if __name__ == "__main__":  # the process of `levanter_directly`
    rule, attrs, inputs, overrides = sys.argv[1], *(json.loads(argument) for argument in sys.argv[2:5])
    report = _run_levanter(rule, attrs, inputs, overrides, Path(sys.argv[5]), Path.cwd())
    print(json.dumps({**report, "returned_at": time.time()}), flush=True)
