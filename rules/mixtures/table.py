"""A swarm's table: each run's mixture and its losses on the evaluation sets, read from the
mixture_draw and eval_lm outputs the swarm made. `swarm.json` is what the fit reads;
`ratios.csv` and `metrics.csv` are the same table as Olmix reads it (a row per run)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from marinbuild.targets.context import StepFailed
from rules.common.mixture_file import MIXTURE_FILE
from rules.lm.constants import EVAL_METRICS


def read_json(root: Path, name: str, label: str, what: str) -> Any:
    """The JSON file `name` of the input `label` (its output at `root`), or a failed step
    of one line saying what `label` should have been (`what`)."""
    try:
        return json.loads((root / name).read_text())
    except (OSError, ValueError) as error:
        raise StepFailed(f"{label} has no readable {name}: {what}") from error


def _losses(label: str, metrics: Mapping[str, Any]) -> dict[str, float]:
    sets = metrics.get("sets")
    if not isinstance(sets, dict) or not sets:
        raise StepFailed(f"{label}: {EVAL_METRICS} has no losses by data set; evaluations must be eval_lm targets")
    return {name: float(values["loss"]) for name, values in sets.items()}


def gather(
    runs: Sequence[str], mixtures: Sequence[tuple[str, Path]], evals: Sequence[tuple[str, Path]]
) -> dict[str, Any]:
    """The table of the runs named `runs`, from their mixtures' and evaluations' outputs."""
    rows, first = [], None
    for run, (mixture_label, mixture_root), (eval_label, eval_root) in zip(runs, mixtures, evals):
        mixture = read_json(mixture_root, MIXTURE_FILE, mixture_label, "a swarm's mixtures are mixture_draw targets")
        if first is None:
            first = mixture
        elif list(mixture["weights"]) != list(first["weights"]):
            raise StepFailed(f"{mixture_label} mixes other sources than {rows[0]['mixture']}")
        losses = _losses(eval_label, read_json(eval_root, EVAL_METRICS, eval_label, "evaluations are eval_lm targets"))
        rows.append(
            {"run": run, "mixture": mixture_label, "weights": list(mixture["weights"].values()), "losses": losses}
        )
    assert first is not None
    evals_seen = list(rows[0]["losses"])
    for row in rows:
        if list(row["losses"]) != evals_seen:
            raise StepFailed(f"{row['run']} was evaluated on {list(row['losses'])}, not on {evals_seen} like the rest")
    return {
        "sources": [first["names"][label] for label in first["weights"]],
        "labels": list(first["weights"]),
        "evals": evals_seen,
        "prior": first["prior"],
        "source_tokens": first["source_tokens"],
        "run_tokens": first["run_tokens"],
        "max_repetition": first["max_repetition"],
        "runs": rows,
    }


def olmix_csvs(table: Mapping[str, Any]) -> tuple[str, str]:
    """(ratios.csv, metrics.csv): a run a row, keyed by run, weights and losses in columns."""
    ratios, metrics = io.StringIO(), io.StringIO()
    ratio_writer = csv.writer(ratios, lineterminator="\n")
    metric_writer = csv.writer(metrics, lineterminator="\n")
    ratio_writer.writerow(["run", *table["sources"]])
    metric_writer.writerow(["run", *table["evals"]])
    for row in table["runs"]:
        ratio_writer.writerow([row["run"], *row["weights"]])
        metric_writer.writerow([row["run"], *(row["losses"][name] for name in table["evals"])])
    return ratios.getvalue(), metrics.getvalue()
