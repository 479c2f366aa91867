"""The proposal checked by real runs: `validation.json`.

At each scale the proposal is trained beside references (the uniform mixture, the prior,
the swarm's best mixture), all evaluated on the fit's target; at the swarm's scale the
fit's prediction for each is set against its actual loss, and the swarm's best run is the
one the swarm trained. Whether the proposal's advantage holds is read at each scale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from marinbuild.targets.context import StepFailed
from rules.common.mixture_file import MIXTURE_FILE
from rules.lm.constants import EVAL_METRICS
from rules.mixtures.table import read_json

REFERENCES = ("uniform", "prior", "best_run")
SWARM_SCALE = "swarm"  # the scale of the swarm's own runs, where the fit predicts


def _target_loss(label: str, metrics: Mapping[str, Any], target: Mapping[str, float]) -> float:
    sets = metrics.get("sets") or {}
    missing = [name for name in target if name not in sets]
    if missing:
        raise StepFailed(f"{label} did not evaluate {missing}, the fit's target: evaluate on the swarm's sets")
    return sum(weight * sets[name]["loss"] for name, weight in target.items()) / sum(target.values())


def check(
    fit: Mapping[str, Any],
    roles: Sequence[tuple[str, str]],
    mixtures: Sequence[tuple[str, Path]],
    evals: Sequence[tuple[str, Path]],
) -> dict[str, Any]:
    """validation.json: for each (scale, role) of `roles`, its mixture and target loss."""
    scales: dict[str, dict[str, Any]] = {}
    for (scale, role), (mixture_label, mixture_root), (eval_label, eval_root) in zip(roles, mixtures, evals):
        mixture = read_json(mixture_root, MIXTURE_FILE, mixture_label, "validation mixtures are mixture_pick targets")
        metrics = read_json(eval_root, EVAL_METRICS, eval_label, "evaluations are eval_lm targets")
        found = scales.setdefault(scale, {"scale": scale, "run_tokens": mixture["run_tokens"], "runs": {}})
        names = mixture["names"]
        found["runs"][role] = {
            "weights": {names[label]: weight for label, weight in mixture["weights"].items()},
            "loss": _target_loss(eval_label, metrics, fit["target"]),
            "evaluation": eval_label,
        }
    for found in scales.values():
        runs = found["runs"]
        if found["scale"] == SWARM_SCALE:
            runs.setdefault(
                "best_run",
                {
                    "weights": fit["best_run"]["weights"],
                    "loss": fit["best_run"]["loss"],
                    "evaluation": fit["best_run"]["run"],
                },
            )
            found["predicted"] = {role: fit[role]["predicted"] for role in ("proposal", *REFERENCES) if role in runs}
            if "proposal" in runs:
                actual = runs["proposal"]["loss"]
                found["prediction_error"] = (fit["proposal"]["predicted"] - actual) / actual
        if "proposal" in runs:
            found["proposal_beats"] = {
                role: runs["proposal"]["loss"] < runs[role]["loss"] for role in REFERENCES if role in runs
            }
            found["holds"] = all(found["proposal_beats"].values())
    return {"target": fit["target"], "regression": fit["regression"], "scales": list(scales.values())}
