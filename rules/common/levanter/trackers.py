"""Where a Levanter run's metrics go: the step's own metrics file, progress lines, and
optionally Weights & Biases.

`MetricsFile` writes what the recipe determines into the output (`metrics.jsonl`) and
the machine's timing beside it; its rows also feed the progress lines of the step's log
and of the live display. A W&B tracker (`tracker = "wandb"` on train_lm) only *reports*
the run elsewhere: it is not part of the key, and its run id is derived from the key, so
every attempt at one key — a resume after a kill or a preemption — logs to the same
W&B run.
"""

from __future__ import annotations

import rules.common.levanter.environment  # noqa: F401  (first: offline, before Levanter)

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
from levanter.tracker import Tracker
from levanter.tracker.tracker import TrackerConfig
from levanter.tracker.wandb import WandbConfig, WandbTracker
from levanter.utils.jax_utils import jnp_to_python

from rules.common.training_files import METRICS

# Per attempt, beside Levanter's logs: each step's wall-clock time and timing metrics.
TIMING_FILE = "timing.jsonl"
# ctx.progress: (done, total, text).
ProgressFn = Callable[[float, "float | None", str], None]
# A step's row was written: (step, its values, its timing).
StepFn = Callable[[int, dict[str, Any], dict[str, Any]], None]

# How many progress lines a run reports at most, besides its evaluations, and the
# longest silence between two (the live display and `marinbuild log` of a long run).
_PROGRESS_LINES = 100
_PROGRESS_SILENCE_S = 30.0


# -- the metrics file -----------------------------------------------------------------------


class MetricsFile(Tracker):
    """A Levanter tracker appending one JSON line per step (all metrics logged at that step).

    Levanter logs a step's metrics in several calls (loss, throughput, evaluation); they
    are merged and written when the next step starts or the run finishes. Timing (wall
    clock, durations, rates) goes to a file of its own, apart from the output: `metrics.jsonl`
    holds only what the recipe determines, so two trainings of one key write the same bytes.
    `on_step` hears of each row once written (progress lines).
    """

    name = "marinbuild_metrics"

    def __init__(self, path: Path, timing_path: Path, on_step: StepFn | None = None):
        self.path = path
        self.timing_path = timing_path
        self.on_step = on_step
        timing_path.parent.mkdir(parents=True, exist_ok=True)
        self.summary: dict[str, Any] = {}
        self._step: int | None = None
        self._row: dict[str, Any] = {}

    def log_hyperparameters(self, hparams: dict[str, Any]) -> None:
        pass  # the recipe in the action-cache entry already records them

    def log(self, metrics: Mapping[str, Any], *, step: int | None, commit: bool | None = None) -> None:
        if step is None:  # not about a step: a value of the run
            self.log_summary(metrics)
            return
        if step != self._step:
            self._flush()
            self._step = step
        self._row.update({name: plain(value) for name, value in metrics.items()})

    def log_summary(self, metrics: Mapping[str, Any]) -> None:
        self.summary.update({name: plain(value) for name, value in metrics.items()})

    def log_artifact(self, artifact_path: Any, *, name: str | None = None, type: str | None = None) -> None:
        pass

    def finish(self) -> None:
        self._flush()

    def _flush(self) -> None:
        if self._row and self._step is not None:
            timing = {name: value for name, value in self._row.items() if is_timing(name)}
            values = {name: value for name, value in self._row.items() if name not in timing}
            _append_row(self.path, {"step": self._step, **values})
            clock = {"time": round(time.time(), 3), "process_cpu_s": round(time.process_time(), 3)}
            _append_row(self.timing_path, {"step": self._step, **clock, **timing})
            if self.on_step is not None:
                self.on_step(self._step, values, timing)
        self._row = {}


def is_timing(name: str) -> bool:
    """Whether a metric measures the machine rather than the model: Levanter's durations,
    rates and utilisation (`throughput/duration`, `.../tokens_per_second`, `.../mfu`,
    `eval/total_time`, `throughput/hook_time`)."""
    leaf = name.rsplit("/", 1)[-1]
    return leaf in ("duration", "mfu") or leaf.endswith(("_time", "_per_second"))


def _append_row(path: Path, row: dict[str, Any]) -> None:
    with path.open("a") as file:
        file.write(json.dumps(row) + "\n")


@TrackerConfig.register_subclass("marinbuild_metrics")
@dataclasses.dataclass
class MetricsFileConfig(TrackerConfig):
    path: str = METRICS
    timing_path: str = TIMING_FILE

    def init(self, run_id: str | None) -> MetricsFile:
        # `on_step` is set on the instance, not declared: a callable is no config field
        # (Levanter dumps its configs to YAML for the trackers).
        self.tracker = MetricsFile(Path(self.path), Path(self.timing_path), getattr(self, "on_step", None))
        return self.tracker


def plain(value: Any) -> Any:
    if isinstance(value, jax.Array):
        value = jnp_to_python(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


# -- progress -------------------------------------------------------------------------------


class ProgressLines:
    """A training's progress, from the rows of its metrics file: a line in the step's log and
    on the live display every few steps (at most about `_PROGRESS_LINES` of them, and at
    least one every `_PROGRESS_SILENCE_S` seconds), at every evaluation and at the last step:
    `step 60/120: loss 5.432, eval loss 5.501, 10,240 tokens/s`."""

    def __init__(self, steps: int, progress: ProgressFn | None, log: logging.Logger | None):
        self.steps = steps
        self.every = max(1, steps // _PROGRESS_LINES)
        self.progress = progress
        self.log = log
        self._last = time.monotonic()

    def __call__(self, step: int, values: Mapping[str, Any], timing: Mapping[str, Any]) -> None:
        done = step + 1
        evaluated = values.get("eval/loss") is not None
        now = time.monotonic()
        if not (done % self.every == 0 or evaluated or done == self.steps or now - self._last >= _PROGRESS_SILENCE_S):
            return
        self._last = now
        text = progress_text(values, timing)
        if self.progress is not None:
            self.progress(done, self.steps, f"steps{', ' + text if text else ''}")
        if self.log is not None:
            self.log.info("step %d/%d: %s", done, self.steps, text or "no metrics")


def progress_text(values: Mapping[str, Any], timing: Mapping[str, Any]) -> str:
    """`loss 5.432, eval loss 5.501, 10,240 tokens/s` from a step's row (what it has of them)."""
    parts = []
    if isinstance(values.get("train/loss"), (int, float)):
        parts.append(f"loss {values['train/loss']:.3f}")
    if isinstance(values.get("eval/loss"), (int, float)):
        parts.append(f"eval loss {values['eval/loss']:.3f}")
    rate = timing.get("throughput/tokens_per_second")
    if isinstance(rate, (int, float)):
        parts.append(f"{rate:,.0f} tokens/s")
    return ", ".join(parts)


# -- Weights & Biases -----------------------------------------------------------------------

WANDB = "wandb"
# The fields of a train_lm `tracker = {"type": "wandb", ...}` (WandbConfig's names).
WANDB_FIELDS = ("project", "entity", "name", "group", "tags", "mode")


def run_id(key: str) -> str:
    """The W&B run id of every attempt at `key`: a resumed attempt continues the run of
    the attempt it resumes (W&B's `resume="allow"`)."""
    return f"mb-{key[:24]}"


def tracker_fields(tracker: Any) -> dict[str, Any] | None:
    """A train_lm `tracker` attribute as W&B fields, or None (the metrics file only)."""
    if tracker is None:
        return None
    fields = {"type": tracker} if isinstance(tracker, str) else dict(tracker)
    fields.pop("type")
    return fields


@TrackerConfig.register_subclass("marinbuild_wandb")
@dataclasses.dataclass
class RecordedWandbConfig(WandbConfig):
    """Levanter's W&B tracker, which remembers the run it started (its id, project, mode,
    URL and directory) for the attempt record."""

    def init(self, run_id: str | None) -> WandbTracker:
        # Levanter initialises its trackers twice (the global one, then the trainer's): one
        # W&B run serves both.
        if getattr(self, "tracker", None) is not None:
            return self.tracker
        tracker = self.tracker = super().init(run_id)
        run = tracker.run
        self.run_info = {
            "type": WANDB,
            "id": run.id,
            "project": run.project,
            "entity": getattr(run, "entity", None) or None,
            "mode": "offline" if run.offline else "online",
            "url": None if run.offline else run.url,
            "dir": getattr(run, "dir", None),
        }
        return tracker


def wandb_config(fields: Mapping[str, Any], key: str, label: str) -> RecordedWandbConfig:
    """The W&B tracker of a run: the target's fields, the run id of its key, the label as
    the run's name unless it names one. Unset fields are left to W&B's environment
    (WANDB_PROJECT, WANDB_ENTITY, WANDB_MODE: `offline` keeps everything on this machine)."""
    return RecordedWandbConfig(
        project=fields.get("project"),
        entity=fields.get("entity"),
        name=fields.get("name") or label.lstrip("/"),
        group=fields.get("group"),
        tags=list(fields.get("tags") or []),
        mode=fields.get("mode"),
        id=run_id(key),
        resume="allow",
        save_code=False,  # the recipe is the code of record; W&B need not sniff the checkout
    )
