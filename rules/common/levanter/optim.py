"""train_lm's optimizer: Levanter's AdamW, whose learning rate is a value of the optimizer
state rather than a constant of the compiled training step.

Levanter builds its learning-rate schedule from Python floats, which JAX bakes into the
compiled training step as constants: two runs of a learning-rate sweep then compile
different programs, and JAX's persistent compilation cache (which marinbuild keeps per
machine) never serves the second. Here the schedule is an optax *stateful* schedule
whose state holds the peak rate as an array, so the program is the same for every rate
and a sweep compiles its training step once. The schedule itself is Levanter's own
(`AdamConfig.lr_scheduler`), evaluated with the peak as that array: warmup, decay and
cycles are unchanged, and Levanter logs the rate of each step as before
(`optim/learning_rate`). Only the initialisation, which writes the peak into the state,
is compiled per rate.
"""

from __future__ import annotations

import rules.common.levanter.environment  # noqa: F401  (first: offline, before Levanter)

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from levanter.optim import AdamConfig
from levanter.optim.config import OptimizerConfig


class PeakScheduleState(NamedTuple):
    count: jax.Array  # steps taken
    peak: jax.Array  # the learning rate the schedule rises to (AdamConfig.learning_rate)


class PeakSchedule:
    """Levanter's schedule of `config`, with its peak read from the optimizer state (an
    `optax.StatefulSchedule`, which `optax.inject_hyperparams` keeps in that state)."""

    def __init__(self, config: AdamConfig, num_train_steps: int):
        self.config = config
        self.num_train_steps = num_train_steps

    def init(self) -> PeakScheduleState:
        return PeakScheduleState(jnp.zeros([], jnp.int32), jnp.asarray(self.config.learning_rate, jnp.float32))

    def update(self, state: PeakScheduleState, **extra_args: Any) -> PeakScheduleState:
        return PeakScheduleState(optax.safe_increment(state.count), state.peak)

    def __call__(self, state: PeakScheduleState, **extra_args: Any) -> jax.Array:
        with_peak = dataclasses.replace(self.config, learning_rate=state.peak)
        return AdamConfig.lr_scheduler(with_peak, self.num_train_steps)(state.count)


@OptimizerConfig.register_subclass("marinbuild_adam")
@dataclasses.dataclass(frozen=True)
class RuntimePeakAdamConfig(AdamConfig):
    """AdamConfig (same fields, same defaults) whose schedule is a `PeakSchedule`."""

    def lr_scheduler(self, num_train_steps: int, override_lr: float | None = None) -> Any:
        if override_lr is not None:  # not AdamW's own rate: leave it as Levanter builds it
            return super().lr_scheduler(num_train_steps, override_lr)
        return PeakSchedule(self, num_train_steps)
