"""One Levanter training, resumed after a kill, its outputs written as train_lm's: the
one way train_lm and sft_lm train, so that both resume alike, record the same metrics
and summaries, and publish outputs eval_lm and export_hf read.

A training runs in its key's scratch space (rules/common/training_files.py): the next
attempt at the key resumes from the checkpoints and metrics an earlier one left there.
Its output: `checkpoint/`, `tokenizer/`, `metrics.jsonl`, `model.json`, `summary.json`,
and each state it keeps (rules/common/levanter/kept_states.py).
"""

from __future__ import annotations

import rules.common.levanter.environment  # noqa: F401  (first: offline, before Levanter)

import dataclasses
import json
import logging
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
from jax.experimental import multihost_utils
from levanter.main import train_lm as levanter_train_lm
from levanter.tracker.tracker import TrackerConfig

from marinbuild.targets.context import StepFailed
from rules.common.corpus import SUMMARY
from rules.common.levanter.configs import TrainerSettings
from rules.common.levanter.data import tokenizer_digest
from rules.common.levanter.kept_states import KeptStates, PublishFn, fix_checkpoint_timestamp, wait_for_checkpoint
from rules.common.levanter.library_patches import quiet_tokenizer_name, router_metrics
from rules.common.levanter.metrics import measured, read_rows, train_summary
from rules.common.levanter.trackers import (
    TIMING_FILE,
    MetricsFileConfig,
    ProgressFn,
    ProgressLines,
    RecordedWandbConfig,
)
from rules.common.training_files import (
    CHECKPOINT,
    CHECKPOINTS,
    METRICS,
    MODEL_FILE,
    TOKENIZER_DIR,
    checkpoint_path,
    resume_step,
)


@dataclasses.dataclass(frozen=True)
class Places:
    """Where a training step works: its output, its key's scratch space (what a resumed
    attempt finds) and its temporary directory."""

    out: Path
    scratch: Path
    tmp: Path


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """The step behind a training: its label and key (the W&B run's name and id), and
    where its progress lines go (`ctx.progress`, `ctx.log`)."""

    label: str
    key: str
    progress: ProgressFn | None = None
    log: logging.Logger | None = None


@dataclasses.dataclass(frozen=True)
class Trained:
    """What a training attempt reports: `summary` (summary.json, determined by the recipe)
    and `measured` (wall time, throughput, where it resumed: for the attempt record)."""

    summary: dict[str, Any]
    measured: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Training:
    """A Levanter training ready to run, as `run_training` takes it: the config of a
    Levanter entry point (its trainer made by `trainer_config` from `in_scratch`), which
    `launch` runs; what model.json records (`recorded`: the resolved `model` and
    `trainer`, and the `keep_checkpoints` handed to `publish` as each is written); the
    local tokenizer directory it trains with; where it works; when the step's process
    started (for the time to its first step); whether it is one process of a multi-host
    run (`distributed`, in JAX distributed already; `scratch` is shared by all of them);
    the metrics rows its history starts with (`initial`: a continuation's); and what
    summary.json shows besides the run's numbers (`summary_extra`)."""

    config: Any
    launch: Callable[[], None]
    recorded: Mapping[str, Any]
    tokenizer: Path
    places: Places
    started: float
    distributed: bool = False
    log: logging.Logger | None = None
    publish: PublishFn | None = None
    initial: Sequence[dict[str, Any]] = ()
    summary_extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def in_scratch(trainer: Mapping[str, Any], seed: int, places: Places, run: RunInfo | None = None) -> TrainerSettings:
    """The trainer of a training `run_training` runs: its checkpoints and metrics in the
    scratch space, where the next attempt resumes from them, and with `run` its progress
    lines. Only process 0 (whose output is published) writes the scratch space's metrics;
    another host of a multi-host run writes a file of its own."""
    metrics = places.scratch / METRICS if jax.process_index() == 0 else places.tmp / METRICS
    return TrainerSettings(
        trainer=trainer,
        seed=seed,
        checkpoints=places.scratch / CHECKPOINTS,
        metrics=metrics,
        log_dir=places.tmp / "levanter-logs",
        on_step=None if run is None else ProgressLines(trainer["steps"], run.progress, run.log),
    )


def launch_train_lm(config: Any) -> None:
    """Levanter's `train_lm` on `config`: the one launch of train_lm and of sft_lm's full
    fine-tuning, with a Mixtral's router statistics as metrics, and without a warning per
    token cache that its tokenizer's name is not the reader's (library_patches.py)."""
    with router_metrics(config.model), quiet_tokenizer_name():
        levanter_train_lm.main(config)


def run_training(training: Training) -> Trained:
    """Run (or resume) one Levanter training in its scratch space, then write its outputs."""
    out, scratch = training.places.out, training.places.scratch
    if training.log is not None:
        training.log.info("JAX devices: %s", ", ".join(str(device) for device in jax.devices()))
    checkpoints, metrics = scratch / CHECKPOINTS, scratch / METRICS
    last_step = training.recorded["trainer"]["steps"] - 1
    last = checkpoints / f"step-{last_step}"
    if jax.process_index() == 0:
        keep_until_resume_point(scratch, training.initial)
    if training.distributed:
        multihost_utils.sync_global_devices("marinbuild: scratch ready")
    resumed_from = _resume_step(scratch)
    if resumed_from is not None:  # that checkpoint and no other (Levanter would take the newest by save time)
        training.config.trainer.load_checkpoint_path = str(scratch / checkpoint_path(resumed_from))
    # Levanter refuses a run with no steps left: one whose last step is saved and logged is done.
    finished = resumed_from == last_step
    record = _model_record(training.recorded, training.tokenizer)
    kept = KeptStates(
        training.recorded.get("keep_checkpoints") or [],
        checkpoints,
        metrics,
        record,
        training.tokenizer,
        training.places.tmp / "kept",
    )
    trackers = trackers_by_type(training.config.trainer.tracker)
    with kept.watching(training.publish if jax.process_index() == 0 else None):
        if not finished:
            training.launch()
            # Not every entry point finishes its trackers (lora_lm does not): the last
            # step's row is written once the metrics file is finished.
            trackers[MetricsFileConfig].tracker.finish()
    if not wait_for_checkpoint(last / "metadata.json"):
        raise StepFailed(f"training ended without a checkpoint at {last.name}; see the log")
    kept.write(out)
    shutil.copytree(last, out / CHECKPOINT)
    fix_checkpoint_timestamp(out / CHECKPOINT / "metadata.json")
    shutil.copytree(training.tokenizer, out / TOKENIZER_DIR)
    shutil.copy(metrics, out / METRICS)
    (out / MODEL_FILE).write_text(record)
    logged = trackers[MetricsFileConfig].tracker.summary if not finished else {}
    summary = train_summary(read_rows(metrics), _parameter_count(logged, scratch / "parameter_count.json"))
    summary.update(training.summary_extra)
    (out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    timing = read_rows(Path(training.config.trainer.log_dir) / TIMING_FILE)
    figures = measured(timing, resumed_from, training.started)
    # What it trained on: "1 x cpu", "8 x NVIDIA H100 80GB HBM3", "4 x TPU v5 lite".
    figures["devices"] = f"{jax.device_count()} x {jax.devices()[0].device_kind}"
    wandb = trackers.get(RecordedWandbConfig)
    if wandb is not None and hasattr(wandb, "run_info"):  # where it logged: an attempt's fact, not the output's
        figures["tracker"] = wandb.run_info
    return Trained(summary, figures)


def _resume_step(scratch: Path) -> int | None:
    """The step a run resumes from (`resume_step`), from the files of its scratch space."""
    files = [path.relative_to(scratch).as_posix() for path in (scratch / CHECKPOINTS).glob("step-*/metadata.json")]
    return resume_step(files, lambda name: (scratch / name).read_bytes() if (scratch / name).is_file() else None)


def keep_until_resume_point(scratch: Path, initial: Sequence[dict[str, Any]] = ()) -> None:
    """Delete from a run's scratch space what comes after the checkpoint it resumes from:
    later checkpoints, whose step a killed attempt saved but did not log (or did not finish
    saving), and the metrics of later steps, which it logged but did not checkpoint. Those
    steps run again, identically, and each appears once in `metrics.jsonl`. A fresh run's
    file starts with the `initial` rows (those of the state it continues from)."""
    step = _resume_step(scratch)
    for checkpoint in (scratch / CHECKPOINTS).glob("step-*"):
        if step is None or int(checkpoint.name.removeprefix("step-")) > step:
            shutil.rmtree(checkpoint, ignore_errors=True)
    kept = initial if step is None else [row for row in read_rows(scratch / METRICS) if row["step"] <= step]
    (scratch / METRICS).write_text("".join(json.dumps(row) + "\n" for row in kept))


def _model_record(recorded: Mapping[str, Any], tokenizer: Path) -> str:
    """model.json, for eval_lm: the model config, the digest of the tokenizer it was trained
    with, and how the training evaluated (eval_lm's defaults)."""
    trainer = recorded["trainer"]
    evaluation = {"batch_size": trainer["batch_size"], "max_batches": trainer["max_eval_batches"]}
    record = {"model": recorded["model"], "tokenizer_blake3": tokenizer_digest(tokenizer), "evaluation": evaluation}
    return json.dumps(record, indent=2) + "\n"


def trackers_by_type(tracker: TrackerConfig | Sequence[TrackerConfig]) -> dict[type, Any]:
    """A trainer's tracker configs by type (Levanter takes one or a tuple)."""
    configs = tracker if isinstance(tracker, Sequence) else (tracker,)
    return {type(config): config for config in configs}


def _parameter_count(logged: Mapping[str, Any], saved: Path) -> int | None:
    """The count Levanter logs when training starts, kept in scratch for an attempt that
    only publishes what an earlier one trained (and so logs nothing)."""
    if "parameter_count" in logged and jax.process_index() == 0:
        saved.write_text(json.dumps(logged["parameter_count"]))
    return json.loads(saved.read_text()) if saved.exists() else None
