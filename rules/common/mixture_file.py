"""A data mixture written by one step for a training to read: `mixture.json`.

A swarm's mixtures and a fit's proposal depend on what the sources hold (their token counts,
a regression over trained runs), so they are known only once a step has run. That step
writes them here; `train_lm(mixture = ...)` reads the weights of its `data` from it, and its
key holds the file's digest like any input's: the same weights, the same run.

    {"weights": {source label: weight, ...},   # sum 1, in the order of the sources
     "names": {source label: short name},      # the swarm's names of its sources (columns)
     ...}                                      # how they were chosen: the writer's own fields
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import fsspec

from marinbuild.targets.context import StepFailed

MIXTURE_FILE = "mixture.json"


def read_mixture(location: str) -> dict[str, Any]:
    """The mixture.json in the output at `location` (a directory or store URL)."""
    try:
        with fsspec.open(f"{location}/{MIXTURE_FILE}", "r") as file:
            found = json.load(file)
    except (OSError, ValueError) as error:
        raise StepFailed(f"no readable {MIXTURE_FILE} in {location}: {error}") from error
    weights = found.get("weights") if isinstance(found, dict) else None
    if not isinstance(weights, dict) or not all(isinstance(value, (int, float)) for value in weights.values()):
        raise StepFailed(f"{MIXTURE_FILE} in {location} holds no {{label: weight}} under 'weights'")
    return found


def weights_for(label: str, mixture: Mapping[str, Any], data: Sequence[str]) -> dict[str, float]:
    """The weights `mixture` (read from the target `label`) gives the labels of `data`, in
    data's order: it must weigh exactly those sources."""
    weights = mixture["weights"]
    if set(weights) != set(data):
        raise StepFailed(
            f"{label} weighs {sorted(weights)}, but data names {sorted(data)}: give data the mixture's sources"
        )
    return {source: float(weights[source]) for source in data}


def weight_columns(mixture: Mapping[str, Any]) -> dict[str, float]:
    """The weights as a run's summary shows them, a number each (`weight.<name>`), so that
    `compare` and the report show a swarm's mixtures as columns beside its losses."""
    names = mixture.get("names") or {}
    return {
        f"weight.{names.get(label, label.rpartition(':')[2])}": weight for label, weight in mixture["weights"].items()
    }
