"""Levanter behind `train_lm` and `eval_lm`: its configs built from BUILD attributes, a
tracker that writes metrics into the step's output, and the runs themselves.

This module imports jax and Levanter, so only a running step (or a benchmark) imports
it; `rules/lm.py` declares the rules and stays cheap to load. Everything runs offline:
tokenizers and data come from inputs in the store, never from the Hugging Face Hub.
"""

from __future__ import annotations

import os

# Before transformers/huggingface_hub are imported: a build never reaches the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "disabled"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import dataclasses
import json
import math
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import blake3
import fsspec
import jax
from jax.experimental import multihost_utils
from levanter.checkpoint import CheckpointerConfig, discover_latest_checkpoint
from levanter.data.text import LMMixtureDatasetConfig, UrlDatasetSourceConfig
from levanter.distributed import DistributedConfig, RayConfig
from levanter.layers.attention import AttentionBackend
from levanter.main import eval_lm as levanter_eval_lm
from levanter.main import train_lm as levanter_train_lm
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from levanter.tracker import Tracker
from levanter.tracker.tracker import TrackerConfig
from levanter.trainer import TrainerConfig
from levanter.utils.activation import ActivationFunctionEnum
from levanter.utils.jax_utils import jnp_to_python

from marinbuild.targets.context import StepFailed
from rules import lm_config

# What a tokenized target provides (the `tokenize` rule's output contract).
SPLITS = ("train", "validation")
TOKENIZER_DIR = "tokenizer"
_FINAL_CHECKPOINT_WAIT_S = 600.0
# What train_lm writes next to the checkpoint, for eval_lm: the model config and the
# digest of the tokenizer it was trained with.
MODEL_FILE = "model.json"
# Per attempt, beside Levanter's logs: each step's wall-clock time and timing metrics.
TIMING_FILE = "timing.jsonl"
# The timestamp written into the published checkpoint's metadata.json in place of the
# save time, which would make every training's output differ. Levanter reads it only to
# order checkpoints in one directory, and an output holds one.
CHECKPOINT_TIMESTAMP = "2000-01-01T00:00:00"


# -- metrics --------------------------------------------------------------------------------


class MetricsFile(Tracker):
    """A Levanter tracker appending one JSON line per step (all metrics logged at that step).

    Levanter logs a step's metrics in several calls (loss, throughput, evaluation); they
    are merged and written when the next step starts or the run finishes. Timing (wall
    clock, durations, rates) goes to a file of its own, apart from the output: `metrics.jsonl`
    holds only what the recipe determines, so two trainings of one key write the same bytes.
    """

    name = "marinbuild_metrics"

    def __init__(self, path: Path, timing_path: Path):
        self.path = path
        self.timing_path = timing_path
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
        self._row.update({name: _plain(value) for name, value in metrics.items()})

    def log_summary(self, metrics: Mapping[str, Any]) -> None:
        self.summary.update({name: _plain(value) for name, value in metrics.items()})

    def log_artifact(self, artifact_path: Any, *, name: str | None = None, type: str | None = None) -> None:
        pass

    def finish(self) -> None:
        self._flush()

    def _flush(self) -> None:
        if self._row:
            timing = {name: value for name, value in self._row.items() if is_timing(name)}
            values = {name: value for name, value in self._row.items() if name not in timing}
            _append_row(self.path, {"step": self._step, **values})
            _append_row(self.timing_path, {"step": self._step, "time": round(time.time(), 3), **timing})
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
    path: str = "metrics.jsonl"
    timing_path: str = "timing.jsonl"

    def init(self, run_id: str | None) -> MetricsFile:
        self.tracker = MetricsFile(Path(self.path), Path(self.timing_path))
        return self.tracker


def _plain(value: Any) -> Any:
    if isinstance(value, jax.Array):
        value = jnp_to_python(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _last(rows: list[dict[str, Any]], name: str) -> Any:
    return next((row[name] for row in reversed(rows) if row.get(name) is not None), None)


# -- data -----------------------------------------------------------------------------------


def tokenized_sets(inputs: Mapping[str, str], tmp: Path) -> tuple[dict[str, str], Path]:
    """{tag: output location} for tokenized targets, and a local copy of their (shared) tokenizer.

    Locations are local directories or store URLs (`gs://...`): Levanter reads its token
    caches from either, so on a shared store nothing but the tokenizer is downloaded.
    Tags are target names (metrics read `eval/<tag>/loss`), or whole labels where two
    targets share a name.
    """
    names = [label.rpartition(":")[2] for label in inputs]
    sets: dict[str, str] = {}
    for (label, location), name in zip(inputs.items(), names):
        fs, root = fsspec.core.url_to_fs(location)
        missing = [part for part in (*SPLITS, TOKENIZER_DIR) if not fs.isdir(f"{root}/{part}")]
        if missing:
            raise StepFailed(
                f"{label} is not a tokenized data set (no {', '.join(missing)} in its output); use a tokenize target"
            )
        sets[name if names.count(name) == 1 else label.lstrip("/")] = location
    tokenizers = {
        tag: _fetch_tokenizer(location, tmp / "tokenizers" / str(index))
        for index, (tag, location) in enumerate(sets.items())
    }
    if len({tokenizer_digest(directory) for directory in tokenizers.values()}) > 1:
        raise StepFailed(
            f"the data sets were tokenized with different tokenizers: {sorted(sets)}; tokenize them with the same one"
        )
    return sets, next(iter(tokenizers.values()))


def _fetch_tokenizer(location: str, local: Path) -> Path:
    """The tokenizer directory of a token cache, as local files (it is small)."""
    fs, root = fsspec.core.url_to_fs(location)
    local.mkdir(parents=True)
    for path in fs.find(f"{root}/{TOKENIZER_DIR}"):
        fs.get_file(path, str(local / path[len(root) + len(TOKENIZER_DIR) + 2 :]))
    return local


def _read_text(location: str) -> str:
    with fsspec.open(location, "r") as file:
        return file.read()


def tokenizer_digest(directory: Path) -> str:
    return blake3.blake3((directory / "tokenizer.json").read_bytes()).hexdigest()


def data_config(sets: Mapping[str, str], weights: Mapping[str, float], tokenizer: Path) -> LMMixtureDatasetConfig:
    """A Levanter mixture over prebuilt caches (one component for a single data set).

    A mixture restarts a component that runs out, so a run always lasts its steps (a
    single Levanter data set would stop training silently at the end of the data).
    """
    return LMMixtureDatasetConfig(
        tokenizer=str(tokenizer),
        cache_dir=None,
        configs={tag: UrlDatasetSourceConfig(cache_dir=location) for tag, location in sets.items()},
        train_weights=dict(weights),
        shuffle=True,
        permutation_type="feistel",
    )


# -- configs --------------------------------------------------------------------------------


def model_config(fields: Mapping[str, Any], tokenizer: Path, tmp: Path) -> LlamaConfig:
    """LlamaConfig from a BUILD dict, with a local tokenizer and HF reference, never the Hub.

    Every value comes from the dict resolved against rules/lm_config.py (a target's attrs
    already are; a model.json of an older output may lack fields added since). The
    reference (where the HF export takes its config defaults and tokenizer from) is the
    tokenizer next to a `config.json` naming the Llama architecture.
    """
    fields = lm_config.resolve("model", fields)
    reference = tmp / "hf-reference"
    shutil.copytree(tokenizer, reference, dirs_exist_ok=True)
    (reference / "config.json").write_text(json.dumps({"model_type": "llama"}))
    backend = fields["attn_backend"]
    return LlamaConfig(
        **{
            **fields,
            # JSON holds the enums' values; Levanter wants the enums.
            "activation_function": ActivationFunctionEnum(fields["activation_function"]),
            "attn_backend": None if backend is None else AttentionBackend(backend),
        },
        tokenizer=str(tokenizer),
        reference_checkpoint=str(reference),
    )


def optimizer_config(fields: Mapping[str, Any]) -> AdamConfig:
    return AdamConfig(**lm_config.resolve("optimizer", fields))


def trainer_config(
    trainer: Mapping[str, Any],
    seed: int,
    checkpoints: Path | None,
    metrics: Path,
    log_dir: Path,
    distributed: bool = False,
) -> TrainerConfig:
    """Levanter's trainer on whatever devices this process sees, without wandb or a Ray cluster.

    `trainer` is a `trainer` dict of train_lm (eval_lm makes one too), resolved against
    rules/lm_config.py. Checkpoints go under `checkpoints` every `checkpoint_interval`
    steps and at the last step (so the output always holds the final state), with no run
    id in the path: the next attempt of the same key finds them and resumes. Levanter
    numbers steps from 0 and never saves at step 0, hence at least 2 steps.
    """
    trainer = lm_config.resolve("trainer", trainer)
    steps, batch_size = trainer["steps"], trainer["batch_size"]
    every, last = trainer["checkpoint_interval"], steps - 1
    keep = [{"every": every, "until": None}]
    if last % every:
        keep = [{"every": every, "until": last - 1}, {"every": last, "until": None}]
    return TrainerConfig(
        seed=seed,
        id="train",
        log_dir=log_dir,
        tracker=MetricsFileConfig(path=str(metrics), timing_path=str(log_dir / TIMING_FILE)),
        num_train_steps=steps,
        train_batch_size=batch_size,
        per_device_eval_parallelism=max(1, batch_size // jax.device_count()),
        steps_per_eval=trainer["eval_interval"],
        max_eval_batches=trainer["max_eval_batches"],
        checkpointer=CheckpointerConfig(
            base_path=str(checkpoints or log_dir / "checkpoints"), keep=keep, append_run_id_to_base_path=False
        ),
        ray=RayConfig(auto_start_cluster=False),
        # A multi-host step's processes joined JAX distributed before Levanter starts.
        distributed=DistributedConfig(initialize_jax_distributed=not distributed),
        require_accelerator=False,
        log_jaxprs=False,
        log_xla_hlo=False,
    )


# -- train_lm -------------------------------------------------------------------------------


def train_config(
    attrs: Mapping[str, Any],
    sets: Mapping[str, Path],
    tokenizer: Path,
    scratch: Path,
    tmp: Path,
    distributed: bool = False,
) -> levanter_train_lm.TrainLmConfig:
    """Levanter's config for a `train_lm` target: checkpoints, metrics and HF exports in `scratch`."""
    attrs = lm_config.resolve_attrs(attrs)
    mixture = attrs["data"]
    weights = dict(zip(sets, mixture.values())) if isinstance(mixture, dict) else {tag: 1.0 for tag in sets}
    return levanter_train_lm.TrainLmConfig(
        data=data_config(sets, weights, tokenizer),
        model=model_config(attrs["model"], tokenizer, tmp),
        optimizer=optimizer_config(attrs["optimizer"]),
        trainer=trainer_config(
            attrs["trainer"],
            attrs["seed"],
            scratch / "checkpoints",
            _metrics_file(scratch, tmp),
            tmp / "levanter-logs",
            distributed,
        ),
        hf_save_path=str(scratch / "hf"),
        hf_save_steps=attrs["trainer"]["steps"],
    )


def _metrics_file(scratch: Path, tmp: Path) -> Path:
    """Where this process's tracker writes: the scratch space for process 0 (the one whose
    output is published), a file of its own for the other hosts of a multi-host run."""
    return scratch / "metrics.jsonl" if jax.process_index() == 0 else tmp / "metrics.jsonl"


@dataclasses.dataclass(frozen=True)
class Trained:
    """What a training attempt reports: `summary` (written to summary.json, determined by
    the recipe) and `measured` (wall time, throughput, where it resumed: for the attempt
    record, since they differ from one training of the same recipe to the next)."""

    summary: dict[str, Any]
    measured: dict[str, Any]


def train(
    attrs: Mapping[str, Any], data: Mapping[str, str], out: Path, scratch: Path, tmp: Path, distributed: bool = False
) -> Trained:
    """Train (or resume) into `scratch`, then write the outputs of `train_lm` into `out`.

    `data` maps each input label to its output location (directory or store URL);
    `attrs["data"]` is one of them or a `{label: weight}` mixture. `distributed`: this is
    one process of a multi-host run, already in JAX distributed; `scratch` is shared by
    all of them.
    """
    started = time.time()
    attrs = lm_config.resolve_attrs(attrs)  # model.json records the effective model config
    sets, tokenizer = tokenized_sets(data, tmp)
    config = train_config(attrs, sets, tokenizer, scratch, tmp, distributed)
    checkpoints, exports = scratch / "checkpoints", scratch / "hf"
    last = f"step-{attrs['trainer']['steps'] - 1}"
    metrics = scratch / "metrics.jsonl"
    if jax.process_index() == 0:
        _drop_unlogged_checkpoints(checkpoints, exports / last, metrics)
    if distributed:
        multihost_utils.sync_global_devices("marinbuild: scratch ready")
    finished = (exports / last).is_dir()
    resumed_from = _keep_metrics_until_checkpoint(checkpoints, _metrics_file(scratch, tmp))
    if not finished:
        levanter_train_lm.main(config)
    if not _wait_for_checkpoint(checkpoints / last / "metadata.json", _FINAL_CHECKPOINT_WAIT_S):
        raise StepFailed(f"training ended without a checkpoint at {last}; see the log")
    shutil.copytree(checkpoints / last, out / "checkpoint")
    _fix_checkpoint_timestamp(out / "checkpoint" / "metadata.json")
    shutil.copytree(exports / last, out / "hf")
    shutil.copy(metrics, out / "metrics.jsonl")
    (out / MODEL_FILE).write_text(
        json.dumps({"model": attrs["model"], "tokenizer_blake3": tokenizer_digest(tokenizer)}, indent=2) + "\n"
    )
    logged = config.trainer.tracker.tracker.summary if not finished else {}
    parameters = _parameter_count(logged, scratch / "parameter_count.json")
    summary = _train_summary(read_metrics(metrics), parameters)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    measured = _measured(read_metrics(Path(config.trainer.log_dir) / TIMING_FILE), resumed_from, started)
    return Trained(summary, measured)


def _parameter_count(logged: Mapping[str, Any], saved: Path) -> int | None:
    """The count Levanter logs when training starts, kept in scratch for an attempt that
    only publishes what an earlier one trained (and so logs nothing)."""
    if "parameter_count" in logged and jax.process_index() == 0:
        saved.write_text(json.dumps(logged["parameter_count"]))
    return json.loads(saved.read_text()) if saved.exists() else None


def _fix_checkpoint_timestamp(metadata: Path) -> None:
    fields = json.loads(metadata.read_text())
    metadata.write_text(json.dumps({**fields, "timestamp": CHECKPOINT_TIMESTAMP}))


def _wait_for_checkpoint(metadata: Path, timeout_s: float) -> bool:
    """Whether the final checkpoint is complete, waiting for it if need be.

    Levanter saves checkpoints asynchronously and its `train_lm.main` returns without
    waiting for the last save to commit (the checkpointer that would wait is internal to
    the trainer), so on a loaded machine `metadata.json`, written at commit, can appear a
    moment after training returns.
    """
    deadline = time.monotonic() + timeout_s
    while not metadata.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _drop_unlogged_checkpoints(checkpoints: Path, final_export: Path, metrics: Path) -> None:
    """Delete the checkpoints (and the final HF export) of steps whose metrics line was not
    written: a killed attempt may save a step's checkpoint before it logs the rest of that
    step (a metrics line is written once the next step starts). Resuming from such a
    checkpoint would leave the step without its line, and the output would differ from an
    uninterrupted run's; resuming from an earlier one trains the step again, identically.
    (A final checkpoint without its export cannot be resumed from either: Levanter refuses
    a run with no steps left.)"""
    logged = {row["step"] for row in read_metrics(metrics)}
    final = int(final_export.name.removeprefix("step-"))
    if final not in logged or not final_export.is_dir():
        shutil.rmtree(final_export, ignore_errors=True)
        shutil.rmtree(checkpoints / final_export.name, ignore_errors=True)
    for checkpoint in checkpoints.glob("step-*"):
        if int(checkpoint.name.removeprefix("step-")) not in logged:
            shutil.rmtree(checkpoint, ignore_errors=True)


def _keep_metrics_until_checkpoint(checkpoints: Path, metrics: Path) -> int | None:
    """The last step of the checkpoint the run resumes from (None for a fresh run).

    Metrics of later steps, which a killed attempt logged but did not checkpoint, are
    dropped: those steps run again, and each step appears once in `metrics.jsonl`.
    """
    latest = discover_latest_checkpoint(str(checkpoints)) if checkpoints.exists() else None
    step = json.loads((Path(latest) / "metadata.json").read_text())["step"] if latest else None
    kept = [row for row in read_metrics(metrics) if step is not None and row["step"] <= step]
    metrics.write_text("".join(json.dumps(row) + "\n" for row in kept))
    return step


def _train_summary(rows: list[dict[str, Any]], parameter_count: int | None) -> dict[str, Any]:
    evals = [row for row in rows if row.get("eval/loss") is not None]
    gflops = _last(rows, "throughput/total_gflops")
    return {
        "steps": rows[-1]["step"] + 1 if rows else 0,
        "train_loss": _last(rows, "train/loss"),
        "initial_eval_loss": evals[0]["eval/loss"] if evals and evals[0]["step"] == 0 else None,
        "eval_loss": _last(rows, "eval/loss"),
        "eval_bpb": _last(rows, "eval/bpb"),
        "tokens": _last(rows, "throughput/total_tokens"),
        "flops": None if gflops is None else gflops * 1e9,
        "parameter_count": parameter_count,
    }


def _measured(timing: list[dict[str, Any]], resumed_from: int | None, started: float) -> dict[str, Any]:
    """This attempt's figures: the steps it trained (none if an earlier attempt finished
    them and it only published), and its throughput, the median over its steps but the
    first, which includes compilation."""
    trained = [row for row in timing if row.get("throughput/tokens_per_second") is not None]
    rates = sorted(row["throughput/tokens_per_second"] for row in trained[1:])
    return {
        "wall_time_s": round(time.time() - started, 2),
        "resumed_from_step": resumed_from,
        "first_step_trained": trained[0]["step"] if trained else None,
        "steps_trained": len(trained),
        "tokens_per_s": round(rates[len(rates) // 2], 1) if rates else None,
    }


# -- eval_lm --------------------------------------------------------------------------------


def evaluate(model: str, data: Mapping[str, str], attrs: Mapping[str, Any], tmp: Path) -> dict[str, Any]:
    """Loss, bits per byte and perplexity of a `train_lm` output (a directory or store URL)
    on each tokenized set; the checkpoint is read where it is."""
    sets, tokenizer = tokenized_sets(data, tmp)
    trained = json.loads(_read_text(f"{model}/{MODEL_FILE}"))
    if trained["tokenizer_blake3"] != tokenizer_digest(tokenizer):
        raise StepFailed("the data sets were tokenized with another tokenizer than the model was trained with")
    metrics = tmp / "metrics.jsonl"
    # One step's trainer (evaluating every step), through the same schema as train_lm's.
    trainer = {"steps": 1, "batch_size": attrs["batch_size"], "max_eval_batches": attrs["max_batches"]}
    config = levanter_eval_lm.EvalLmConfig(
        checkpoint_path=f"{model}/checkpoint",
        data=data_config(sets, {tag: 1.0 for tag in sets}, tokenizer),
        model=model_config(trained["model"], tokenizer, tmp),
        trainer=trainer_config(trainer, 0, None, metrics, tmp / "levanter-logs"),
    )
    levanter_eval_lm.main(config)
    config.trainer.tracker.tracker.finish()
    row = read_metrics(metrics)[-1]

    def scores(prefix: str) -> dict[str, float]:
        loss = row[f"{prefix}/loss"]
        return {"loss": loss, "bpb": row.get(f"{prefix}/bpb"), "perplexity": math.exp(loss)}

    return {**scores("eval"), "sets": {tag: scores(f"eval/{tag}") for tag in sets}}
