"""What a training's metrics add up to: the rows of its files, its summary (what the
recipe determines: summary.json) and what one attempt measured (the attempt record)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rules.common.training_files import written_rows


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a metrics or timing file, [] when there is none; a line not ended yet
    (being written) is left for later."""
    return written_rows(path.read_text()) if path.exists() else []


def last(rows: list[dict[str, Any]], name: str) -> Any:
    """The newest value of `name` among `rows`, None if none has one."""
    return next((row[name] for row in reversed(rows) if row.get(name) is not None), None)


def train_summary(rows: list[dict[str, Any]], parameter_count: int | None) -> dict[str, Any]:
    evals = [row for row in rows if row.get("eval/loss") is not None]
    gflops = last(rows, "throughput/total_gflops")
    return {
        "steps": rows[-1]["step"] + 1 if rows else 0,
        "train_loss": last(rows, "train/loss"),
        "initial_eval_loss": evals[0]["eval/loss"] if evals and evals[0]["step"] == 0 else None,
        "eval_loss": last(rows, "eval/loss"),
        "eval_bpb": last(rows, "eval/bpb"),
        "tokens": last(rows, "throughput/total_tokens"),
        "flops": None if gflops is None else gflops * 1e9,
        "parameter_count": parameter_count,
    }


def measured(timing: list[Mapping[str, Any]], resumed_from: int | None, started: float) -> dict[str, Any]:
    """This attempt's figures: the steps it trained (none if an earlier attempt finished
    them and it only published), and its throughput, the median over its steps but the
    first, which includes compilation."""
    trained = [row for row in timing if row.get("throughput/tokens_per_second") is not None]
    rates = sorted(row["throughput/tokens_per_second"] for row in trained[1:])
    return {
        "wall_time_s": round(time.time() - started, 2),
        # From the process starting to its first step done (start-up, loading, compiling),
        # and the CPU time it took, which other work on the machine does not inflate.
        "time_to_first_step_s": round(trained[0]["time"] - started, 2) if trained else None,
        "cpu_to_first_step_s": trained[0].get("process_cpu_s") if trained else None,
        "resumed_from_step": resumed_from,
        "first_step_trained": trained[0]["step"] if trained else None,
        "steps_trained": len(trained),
        "tokens_per_s": round(rates[len(rates) // 2], 1) if rates else None,
    }
