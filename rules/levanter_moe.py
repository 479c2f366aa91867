"""Levanter's Mixtral in Levanter's `train_lm`: its router's statistics as the step's metrics.

Levanter's Mixtral reports its router (the load-balancing loss, the router z-loss, each
layer's routing entropy and expert loads) with `levanter.tracker.jit_log`. Outside a
`levanter.tracker.defer_tracker_for_jit` block that sends the values to the host with
`jax.experimental.io_callback`, which JAX refuses under differentiation ("IO callbacks do
not support JVP"), and the installed Levanter's trainer opens no such block: as shipped, a
Mixtral fails at its first training step. `router_metrics` makes the loss function that
Levanter's `train_lm` builds open the block and return what the model logged as the loss
function's own metrics, which Levanter's trainer already reduces over microbatches and
hosts and logs in the step's row as `train/<name>`: `train/load_balancing_loss`,
`train/router_z_loss`, `train/moe/layer<i>/routing_entropy`,
`train/moe/layer<i>/expert<j>_load`. The loss itself (router losses included) is Levanter's.

Evaluation runs the model without differentiating it, where the callback works: there the
statistics reach the trackers as values of no step, which `metrics.jsonl` does not record.

Imported by `rules/levanter_lm.py` in a running step only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import levanter.tracker
from levanter.main import train_lm as levanter_train_lm
from levanter.metrics import Metric, ReductionType
from levanter.models.lm_model import LmConfig
from levanter.models.mixtral import MixtralConfig

# Levanter's name for the router losses it logs; the trainer adds the same prefix again.
_TRAIN_PREFIX = "train/"


@contextlib.contextmanager
def router_metrics(model: LmConfig) -> Iterator[None]:
    """While the block runs, Levanter's `train_lm` trains a mixture of experts (`model`)
    with its router's statistics as metrics; nothing changes for another family."""
    if not isinstance(model, MixtralConfig):
        yield
        return
    compute_loss = levanter_train_lm.compute_next_token_loss

    def loss_and_router_metrics(*args: Any, **kwargs: Any) -> tuple[Any, dict[str, Metric]]:
        with levanter.tracker.defer_tracker_for_jit() as logged:
            loss = compute_loss(*args, **kwargs)
        # Each value is one batch's (a mean over its tokens): the step's is their mean.
        return loss, {
            name.removeprefix(_TRAIN_PREFIX): Metric.from_value(value, ReductionType.MEAN)
            for name, value in logged.items()
        }

    levanter_train_lm.compute_next_token_loss = loss_and_router_metrics
    try:
        yield
    finally:
        levanter_train_lm.compute_next_token_loss = compute_loss
