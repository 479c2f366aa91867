"""Levanter behind `train_lm`, `eval_lm` and `export_hf`: its configs built from BUILD
attributes, its trackers (the step's metrics file, progress lines, W&B:
`rules/levanter_trackers.py`), the runs themselves, and its Hugging Face converter (the
export, and the checks before a run starts from a Hugging Face checkpoint).

This module imports jax and Levanter, so only a running step (or a benchmark) imports
it; `rules/lm.py` declares the rules and stays cheap to load. Everything runs offline:
tokenizers and data come from inputs in the store, never from the Hugging Face Hub.
"""

from __future__ import annotations

import os

# Before transformers/huggingface_hub are imported: a build never reaches the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import contextlib
import dataclasses
import json
import logging
import math
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import blake3
import fsspec
import jax
from fsspec.implementations.local import LocalFileSystem
from jax.experimental import multihost_utils
from levanter.checkpoint import CheckpointerConfig
from levanter.compat.hf_checkpoints import HFCompatConfig
from levanter.data.text import (
    LmDatasetFormatBase,
    LMMixtureDatasetConfig,
    TextLmDatasetFormat,
    UrlDatasetSourceConfig,
)
from levanter.distributed import DistributedConfig, RayConfig
from levanter.layers.attention import AttentionBackend
from levanter.main import eval_lm as levanter_eval_lm
from levanter.main import export_lm_to_hf
from levanter.main import train_lm as levanter_train_lm
from levanter.models.llama import LlamaConfig
from levanter.models.mixtral import MixtralConfig
from levanter.models.olmo import Olmo2Config
from levanter.models.qwen import QwenConfig
from levanter.optim import AdamConfig
from levanter.tracker.tracker import TrackerConfig
from levanter.trainer import TrainerConfig
from levanter.utils.activation import ActivationFunctionEnum
from tokenizers import Tokenizer
from transformers import AutoConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from marinbuild.targets.context import StepFailed
from marinbuild.targets.rule import checkpoint_dir
from rules import lm_config
from rules.hf_format import TOKENIZER, check_checkpoint
from rules.levanter_optim import RuntimePeakAdamConfig
from rules.levanter_trackers import (
    MetricsFileConfig,
    ProgressFn,
    ProgressLines,
    RecordedWandbConfig,
    StepFn,
    tracker_fields,
    wandb_config,
)
from rules.library_patches import quiet_tokenizer_name, router_metrics
from rules.training_resume import CHECKPOINTS, METRICS, checkpoint_path, resume_step, written_rows

# JAX's persistent compilation cache (marinbuild points JAX_COMPILATION_CACHE_DIR at a
# directory of this machine): keep every program, however quick to compile. Levanter
# compiles dozens of small ones before the first step (initialisation, data, evaluation),
# each under JAX's default threshold of a second, which together cost more than the
# training step's own compilation on a small model.
if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

# What a tokenized target provides (the `tokenize` rule's output contract).
SPLITS = ("train", "validation")
TOKENIZER_DIR = "tokenizer"
_FINAL_CHECKPOINT_WAIT_S = 600.0
# What train_lm writes next to the checkpoint, for eval_lm: the model config, the digest of
# the tokenizer it was trained with, and how the training evaluated it (eval_lm's defaults).
MODEL_FILE = "model.json"
# eval_lm's batch size for a model whose model.json predates its `evaluation` field.
_EVAL_BATCH_SIZE = 8
# Per attempt, beside Levanter's logs: each step's wall-clock time and timing metrics.
TIMING_FILE = "timing.jsonl"
# The timestamp written into the published checkpoint's metadata.json in place of the
# save time, which would make every training's output differ. Levanter reads it only to
# order checkpoints in one directory, and an output holds one.
CHECKPOINT_TIMESTAMP = "2000-01-01T00:00:00"
# What a tokenize target's caches hold: tokenized text.
TEXT_FORMAT = TextLmDatasetFormat()


# -- metrics --------------------------------------------------------------------------------


def read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _written_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a metrics file being written: a line not ended yet is left for later."""
    return written_rows(path.read_text()) if path.exists() else []


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
        tag: local_copy(f"{location}/{TOKENIZER_DIR}", tmp / "tokenizers" / str(index))
        for index, (tag, location) in enumerate(sets.items())
    }
    if len({tokenizer_digest(directory) for directory in tokenizers.values()}) > 1:
        raise StepFailed(
            f"the data sets were tokenized with different tokenizers: {sorted(sets)}; tokenize them with the same one"
        )
    return sets, next(iter(tokenizers.values()))


def local_copy(location: str, local: Path) -> Path:
    """A directory of the store (a tokenizer, a Hugging Face checkpoint) as local files, for
    the libraries that read only those (transformers): `location` itself on a local store,
    else a copy downloaded into `local`."""
    fs, root = fsspec.core.url_to_fs(location)
    if isinstance(fs, LocalFileSystem):
        return Path(root)
    local.mkdir(parents=True)
    for path in fs.find(root):
        target = local / path[len(root) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(path, str(target))
    return local


def _read_text(location: str) -> str:
    with fsspec.open(location, "r") as file:
        return file.read()


def tokenizer_digest(directory: Path) -> str:
    return blake3.blake3((directory / "tokenizer.json").read_bytes()).hexdigest()


def data_config(
    sets: Mapping[str, str],
    weights: Mapping[str, float],
    tokenizer: Path,
    format: LmDatasetFormatBase = TEXT_FORMAT,
) -> LMMixtureDatasetConfig:
    """A Levanter mixture over prebuilt caches (one component for a single data set).

    A mixture restarts a component that runs out, so a run always lasts its steps (a
    single Levanter data set would stop training silently at the end of the data).
    `format` is what the caches hold: tokenized text (tokenize), or chat (sft_lm).
    """
    return LMMixtureDatasetConfig(
        tokenizer=str(tokenizer),
        cache_dir=None,
        configs={tag: UrlDatasetSourceConfig(cache_dir=location, format=format) for tag, location in sets.items()},
        train_weights=dict(weights),
        shuffle=True,
        permutation_type="feistel",
    )


# -- configs --------------------------------------------------------------------------------


# Levanter's config class of each model family (rules/lm_config.py).
CONFIG_CLASSES: dict[str, type[HFCompatConfig]] = {
    "llama": LlamaConfig,
    "mixtral": MixtralConfig,
    "qwen": QwenConfig,
    "olmo2": Olmo2Config,
}


def model_config(fields: Mapping[str, Any], tokenizer: Path, tmp: Path) -> HFCompatConfig:
    """The Levanter config of a BUILD model dict (its family's class: `CONFIG_CLASSES`),
    with a local tokenizer and HF reference, never the Hub.

    Every value comes from the dict resolved against rules/lm_config.py (a target's attrs
    already are; a model.json of an older output may lack fields added since). The
    reference (where the HF export takes its config defaults and tokenizer from) is the
    tokenizer next to a `config.json` naming the family's Hugging Face architecture.
    """
    fields = lm_config.resolve("model", fields)
    family = lm_config.family(fields)
    reference = tmp / "hf-reference"
    shutil.copytree(tokenizer, reference, dirs_exist_ok=True)
    (reference / "config.json").write_text(json.dumps({"model_type": family.hf_model_type}))
    backend = fields["attn_backend"]
    values = {
        **{name: value for name, value in fields.items() if name != lm_config.FAMILY},
        # JSON holds the enums' values; Levanter wants the enums.
        "activation_function": ActivationFunctionEnum(fields["activation_function"]),
        "attn_backend": None if backend is None else AttentionBackend(backend),
    }
    if "use_flash_attention" in family.excluded:
        values["use_flash_attention"] = None
    return CONFIG_CLASSES[family.name](**values, tokenizer=str(tokenizer), reference_checkpoint=str(reference))


def optimizer_config(fields: Mapping[str, Any]) -> AdamConfig:
    """Levanter's AdamW, its learning rate kept in the optimizer state, not compiled into the
    training step: the runs of a learning-rate sweep share one compiled program."""
    return RuntimePeakAdamConfig(**lm_config.resolve("optimizer", fields))


def trainer_config(
    trainer: Mapping[str, Any],
    seed: int,
    checkpoints: Path | None,
    metrics: Path,
    log_dir: Path,
    distributed: bool = False,
    trackers: Sequence[TrackerConfig] = (),
    on_step: StepFn | None = None,
    kept: Sequence[int] = (),
    initialize_from: str | None = None,
) -> TrainerConfig:
    """Levanter's trainer on whatever devices this process sees, without a Ray cluster.

    `trainer` is a `trainer` dict of train_lm (eval_lm makes one too), resolved against
    rules/lm_config.py. Checkpoints go under `checkpoints` every `checkpoint_interval`
    steps and at the last step (so the output always holds the final state), with no run
    id in the path: the next attempt of the same key finds them and resumes. Levanter
    numbers steps from 0 and never saves at step 0, hence at least 2 steps. Metrics go to
    `metrics` (each row also to `on_step`), and to `trackers` (W&B) if any. The `kept`
    steps are saved too. `initialize_from`: a Levanter checkpoint (model, optimizer state,
    step) the run continues from when it has none of its own yet.
    """
    trainer = lm_config.resolve("trainer", trainer)
    steps, batch_size = trainer["steps"], trainer["batch_size"]
    keep = _checkpoint_policy(trainer["checkpoint_interval"], steps - 1, kept)
    metrics_file = MetricsFileConfig(path=str(metrics), timing_path=str(log_dir / TIMING_FILE))
    metrics_file.on_step = on_step
    return TrainerConfig(
        seed=seed,
        id="train",
        log_dir=log_dir,
        tracker=(metrics_file, *trackers) if trackers else metrics_file,
        num_train_steps=steps,
        train_batch_size=batch_size,
        per_device_eval_parallelism=max(1, batch_size // jax.device_count()),
        steps_per_eval=trainer["eval_interval"],
        max_eval_batches=trainer["max_eval_batches"],
        checkpointer=CheckpointerConfig(
            base_path=str(checkpoints or log_dir / "checkpoints"), keep=keep, append_run_id_to_base_path=False
        ),
        initialize_from=initialize_from,
        ray=RayConfig(auto_start_cluster=False),
        # A multi-host step's processes joined JAX distributed before Levanter starts.
        distributed=DistributedConfig(initialize_jax_distributed=not distributed),
        require_accelerator=False,
        log_jaxprs=False,
        log_xla_hlo=False,
    )


def _checkpoint_policy(every: int, last: int, kept: Sequence[int]) -> list[dict[str, int | None]]:
    """Levanter's `keep` intervals for checkpoints every `every` steps, at each kept step and
    at the last. Levanter saves step s when the `every` of the first interval reaching s
    (`until` >= s) divides s; the intervals' ends must increase."""
    policy: list[dict[str, int | None]] = []
    for stop in sorted({*kept, last}):
        if stop % every == 0:
            continue
        if not policy or policy[-1]["until"] < stop - 1:  # type: ignore[operator]
            policy.append({"every": every, "until": stop - 1})
        policy.append({"every": stop, "until": stop})
    return [*policy, {"every": every, "until": None}]


# -- train_lm -------------------------------------------------------------------------------


def train_config(
    attrs: Mapping[str, Any],
    sets: Mapping[str, Path],
    tokenizer: Path,
    scratch: Path,
    tmp: Path,
    distributed: bool = False,
    run: RunInfo | None = None,
    init: str | None = None,
    init_hf: Path | None = None,
) -> levanter_train_lm.TrainLmConfig:
    """Levanter's config for a `train_lm` target: checkpoints and metrics in `scratch`;
    with `run`, progress lines, and the W&B tracker the target asks for; with `init`, the
    location of a kept state (`init_from`) whose checkpoint it continues from; with
    `init_hf`, a local Hugging Face checkpoint (`init_from_hf`, checked by `check_hf_base`)
    whose weights it starts from, loaded by Levanter's converter."""
    attrs = lm_config.resolve_attrs(attrs)
    mixture = attrs["data"]
    weights = dict(zip(sets, mixture.values())) if isinstance(mixture, dict) else {tag: 1.0 for tag in sets}
    wandb = tracker_fields(attrs.get("tracker"))
    trackers = [wandb_config(wandb, run.key, run.label)] if wandb is not None and run is not None else []
    return levanter_train_lm.TrainLmConfig(
        data=data_config(sets, weights, tokenizer),
        model=model_config(attrs["model"], tokenizer, tmp),
        optimizer=optimizer_config(attrs["optimizer"]),
        trainer=run_trainer_config(
            attrs["trainer"],
            attrs["seed"],
            scratch,
            tmp,
            run,
            distributed,
            trackers,
            attrs.get("keep_checkpoints") or (),
            None if init is None else f"{init}/checkpoint",
        ),
        initialize_from_hf=False if init_hf is None else str(init_hf),
    )


def run_trainer_config(
    trainer: Mapping[str, Any],
    seed: int,
    scratch: Path,
    tmp: Path,
    run: RunInfo | None = None,
    distributed: bool = False,
    trackers: Sequence[TrackerConfig] = (),
    kept: Sequence[int] = (),
    initialize_from: str | None = None,
) -> TrainerConfig:
    """The trainer of a training `run_training` runs: its checkpoints and metrics in
    `scratch`, where the next attempt resumes from them, and with `run` its progress lines."""
    return trainer_config(
        trainer,
        seed,
        scratch / CHECKPOINTS,
        _metrics_file(scratch, tmp),
        tmp / "levanter-logs",
        distributed,
        trackers,
        None if run is None else ProgressLines(trainer["steps"], run.progress, run.log),
        kept,
        initialize_from,
    )


def _metrics_file(scratch: Path, tmp: Path) -> Path:
    """Where this process's tracker writes: the scratch space for process 0 (the one whose
    output is published), a file of its own for the other hosts of a multi-host run."""
    return scratch / METRICS if jax.process_index() == 0 else tmp / "metrics.jsonl"


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
    """What a training attempt reports: `summary` (written to summary.json, determined by
    the recipe) and `measured` (wall time, throughput, where it resumed: for the attempt
    record, since they differ from one training of the same recipe to the next)."""

    summary: dict[str, Any]
    measured: dict[str, Any]


# A kept state's files were written: publish them (`ctx.publish_checkpoint`).
PublishFn = Callable[[int, Path], None]
# How often the scratch space is looked at for kept checkpoints while a run trains.
_KEPT_POLL_S = 0.5


def train(
    attrs: Mapping[str, Any],
    data: Mapping[str, str],
    out: Path,
    scratch: Path,
    tmp: Path,
    distributed: bool = False,
    run: RunInfo | None = None,
    started: float | None = None,
    init: str | None = None,
    publish: PublishFn | None = None,
    init_hf: str | None = None,
) -> Trained:
    """Train (or resume) into `scratch`, then write the outputs of `train_lm` into `out`.

    `data` maps each input label to its output location (directory or store URL);
    `attrs["data"]` is one of them or a `{label: weight}` mixture. `distributed`: this is
    one process of a multi-host run, already in JAX distributed; `scratch` is shared by
    all of them. `started`: when the step's process started (time.time()), for the time
    to its first step. `init`: where the kept state the run continues from lies (its
    checkpoint, model.json and metrics: `init_from` at `init_step`). `publish` is handed
    each kept state (`keep_checkpoints`) as soon as it is written. `init_hf`: where the
    Hugging Face checkpoint whose weights the run starts from lies (`init_from_hf`).
    """
    started = started or time.time()
    attrs = lm_config.resolve_attrs(attrs)  # model.json records the effective model config
    sets, tokenizer = tokenized_sets(data, tmp)
    base = None if init_hf is None else check_hf_base(init_hf, attrs["model"], tokenizer, tmp)
    config = train_config(attrs, sets, tokenizer, scratch, tmp, distributed, run, init, base)
    before = _initial_rows(init, tokenizer) if init is not None else []
    trained = run_training(
        config,
        lambda: launch_train_lm(config),
        attrs,
        tokenizer,
        out,
        scratch,
        tmp,
        started,
        distributed=distributed,
        log=None if run is None else run.log,
        publish=publish,
        initial=before,
    )
    if init is not None:
        trained.measured["continued_from_step"] = attrs["init_step"]
    return trained


def launch_train_lm(config: Any) -> None:
    """Levanter's `train_lm` on `config`: the one launch of train_lm and of sft_lm's full
    fine-tuning, with a Mixtral's router statistics as metrics, and without a warning per
    token cache that its tokenizer's name is not the reader's (rules/library_patches.py)."""
    with router_metrics(config.model), quiet_tokenizer_name():
        levanter_train_lm.main(config)


def run_training(
    config: Any,
    launch: Callable[[], None],
    attrs: Mapping[str, Any],
    tokenizer: Path,
    out: Path,
    scratch: Path,
    tmp: Path,
    started: float,
    *,
    distributed: bool = False,
    log: logging.Logger | None = None,
    publish: PublishFn | None = None,
    initial: Sequence[dict[str, Any]] = (),
) -> Trained:
    """Run (or resume) one Levanter training in `scratch`, then write a training's outputs
    into `out`: checkpoint/, tokenizer/, metrics.jsonl, model.json and summary.json.

    The one way train_lm and sft_lm train, so that both resume alike after a kill, record
    the same metrics and summaries, and publish outputs eval_lm and export_hf read.
    `config` is the config of a Levanter entry point (its `trainer` made by
    `trainer_config`), which `launch` runs; `attrs` holds the resolved `model` (for
    model.json) and `trainer`, and the `keep_checkpoints` handed to `publish` as each is
    written. `tokenizer` is the local directory of the tokenizer the run trains with;
    `initial`: the metrics rows the run's history starts with (a continuation's).
    """
    if log is not None:
        log.info("JAX devices: %s", ", ".join(str(device) for device in jax.devices()))
    checkpoints = scratch / CHECKPOINTS
    last_step = attrs["trainer"]["steps"] - 1
    last = f"step-{last_step}"
    metrics = scratch / METRICS
    if jax.process_index() == 0:
        _keep_until_resume_point(scratch, initial)
    if distributed:
        multihost_utils.sync_global_devices("marinbuild: scratch ready")
    resumed_from = _resume_step(scratch)
    if resumed_from is not None:  # that checkpoint and no other (Levanter would take the newest by save time)
        config.trainer.load_checkpoint_path = str(scratch / checkpoint_path(resumed_from))
    # Levanter refuses a run with no steps left: one whose last step is saved and logged is done.
    finished = resumed_from == last_step
    record = _model_record(attrs, tokenizer)
    kept = KeptStates(attrs.get("keep_checkpoints") or [], checkpoints, metrics, record, tokenizer, tmp / "kept")
    trackers = _trackers(config.trainer.tracker)
    with kept.watching(publish if jax.process_index() == 0 else None):
        if not finished:
            launch()
            # Not every entry point finishes its trackers (lora_lm does not): the last
            # step's row is written once the metrics file is finished.
            trackers[MetricsFileConfig].tracker.finish()
    if not _wait_for_checkpoint(checkpoints / last / "metadata.json", _FINAL_CHECKPOINT_WAIT_S):
        raise StepFailed(f"training ended without a checkpoint at {last}; see the log")
    kept.write(out)
    shutil.copytree(checkpoints / last, out / "checkpoint")
    fix_checkpoint_timestamp(out / "checkpoint" / "metadata.json")
    shutil.copytree(tokenizer, out / TOKENIZER_DIR)
    shutil.copy(metrics, out / "metrics.jsonl")
    (out / MODEL_FILE).write_text(record)
    logged = trackers[MetricsFileConfig].tracker.summary if not finished else {}
    parameters = _parameter_count(logged, scratch / "parameter_count.json")
    summary = _train_summary(read_metrics(metrics), parameters)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    measured = _measured(read_metrics(Path(config.trainer.log_dir) / TIMING_FILE), resumed_from, started)
    # What it trained on: "1 x cpu", "8 x NVIDIA H100 80GB HBM3", "4 x TPU v5 lite".
    measured["devices"] = f"{jax.device_count()} x {jax.devices()[0].device_kind}"
    wandb = trackers.get(RecordedWandbConfig)
    if wandb is not None and hasattr(wandb, "run_info"):  # where it logged: an attempt's fact, not the output's
        measured["tracker"] = wandb.run_info
    return Trained(summary, measured)


def _model_record(attrs: Mapping[str, Any], tokenizer: Path) -> str:
    """model.json, for eval_lm: the model config, the digest of the tokenizer it was trained
    with, and how the training evaluated (eval_lm's defaults)."""
    trainer = attrs["trainer"]
    evaluation = {"batch_size": trainer["batch_size"], "max_batches": trainer["max_eval_batches"]}
    record = {"model": attrs["model"], "tokenizer_blake3": tokenizer_digest(tokenizer), "evaluation": evaluation}
    return json.dumps(record, indent=2) + "\n"


def _initial_rows(init: str, tokenizer: Path) -> list[dict[str, Any]]:
    """The metrics of the run a continuation starts from, up to its kept state: they begin
    its own `metrics.jsonl`, so that it holds the whole history of the weights it ends with
    (and the summary its initial evaluation). Its tokenizer must be the data's."""
    trained = json.loads(_read_text(f"{init}/{MODEL_FILE}"))
    if trained["tokenizer_blake3"] != tokenizer_digest(tokenizer):
        raise StepFailed("init_from was trained on data tokenized with another tokenizer than this run's data")
    return [json.loads(line) for line in _read_text(f"{init}/metrics.jsonl").splitlines() if line.strip()]


class KeptStates:
    """The states a run keeps (`keep_checkpoints`), each assembled in `into` as it lies in
    the output under `checkpoint_dir(step)`: `checkpoint/` (its Levanter checkpoint, with
    the fixed timestamp), `metrics.jsonl` up to its step, `model.json` and `tokenizer/`.

    A state is complete once its checkpoint's `metadata.json` (written last) is there and
    its step's metrics line is written (the line comes when the next step starts). While
    Levanter trains, a thread looks for complete states and publishes each at once, so that
    what reads it (`eval_lm(step = ...)`, a cooldown) can start before the run ends; the
    same files go into the output too, from where marinbuild publishes a state it could
    not publish yet, and which then leaves them out (it keeps each in its entry only).
    """

    def __init__(
        self, steps: Sequence[int], checkpoints: Path, metrics: Path, record: str, tokenizer: Path, into: Path
    ):
        self.pending = sorted(steps)
        self.ready: dict[int, Path] = {}
        self.checkpoints, self.metrics, self.record, self.into = checkpoints, metrics, record, into
        self.tokenizer = tokenizer
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def watching(self, publish: PublishFn | None) -> Iterator[None]:
        """Publish each state as it is written, until the block ends (nothing without `publish`)."""
        if publish is None or not self.pending:
            yield
            return
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(_KEPT_POLL_S) and self.pending:
                for step, directory in self.collect():
                    publish(step, directory)

        thread = threading.Thread(target=watch, name="kept-checkpoints", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            for step, directory in self.collect():  # complete since the last look
                publish(step, directory)

    def collect(self) -> list[tuple[int, Path]]:
        """Assemble the states complete since the last call."""
        with self._lock:
            rows = _written_rows(self.metrics)
            logged = {row["step"] for row in rows}
            found = []
            for step in [step for step in self.pending if step in logged]:
                directory = self._assemble(step, rows)
                if directory is not None:
                    self.pending.remove(step)
                    self.ready[step] = directory
                    found.append((step, directory))
            return found

    def _assemble(self, step: int, rows: list[dict[str, Any]]) -> Path | None:
        source = self.checkpoints / f"step-{step}"
        try:
            json.loads((source / "metadata.json").read_text())
        except (OSError, ValueError):
            return None  # not committed yet
        directory = self.into / f"step-{step}"
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(source, directory / "checkpoint")
        fix_checkpoint_timestamp(directory / "checkpoint" / "metadata.json")
        (directory / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows if row["step"] <= step))
        (directory / MODEL_FILE).write_text(self.record)
        shutil.copytree(self.tokenizer, directory / TOKENIZER_DIR)
        return directory

    def write(self, out: Path) -> None:
        """Every kept state into the output, once training ended."""
        for step in list(self.pending):
            _wait_for_checkpoint(self.checkpoints / f"step-{step}" / "metadata.json", _FINAL_CHECKPOINT_WAIT_S)
        self.collect()
        if self.pending:
            raise StepFailed(f"training ended without its checkpoints at steps {self.pending}; see the log")
        for step, directory in self.ready.items():
            shutil.copytree(directory, out / checkpoint_dir(step))


def _trackers(tracker: TrackerConfig | Sequence[TrackerConfig]) -> dict[type, Any]:
    """A trainer's tracker configs by type (Levanter takes one or a tuple)."""
    configs = tracker if isinstance(tracker, Sequence) else (tracker,)
    return {type(config): config for config in configs}


def _parameter_count(logged: Mapping[str, Any], saved: Path) -> int | None:
    """The count Levanter logs when training starts, kept in scratch for an attempt that
    only publishes what an earlier one trained (and so logs nothing)."""
    if "parameter_count" in logged and jax.process_index() == 0:
        saved.write_text(json.dumps(logged["parameter_count"]))
    return json.loads(saved.read_text()) if saved.exists() else None


def fix_checkpoint_timestamp(metadata: Path) -> None:
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


def _resume_step(scratch: Path) -> int | None:
    """The step a run resumes from (`training_resume.resume_step`), from the files of its scratch space."""
    files = [path.relative_to(scratch).as_posix() for path in (scratch / CHECKPOINTS).glob("step-*/metadata.json")]
    return resume_step(files, lambda name: (scratch / name).read_bytes() if (scratch / name).is_file() else None)


def _keep_until_resume_point(scratch: Path, initial: Sequence[dict[str, Any]] = ()) -> None:
    """Delete from a run's scratch space what comes after the checkpoint it resumes from
    (`_resume_step`): later checkpoints, whose step a killed attempt saved but did not log
    (or did not finish saving), and the metrics of later steps, which it logged but did not
    checkpoint. Those steps run again, identically, and each appears once in
    `metrics.jsonl`. A fresh run's file starts with the `initial` rows (those of the state
    it continues from)."""
    step = _resume_step(scratch)
    for checkpoint in (scratch / CHECKPOINTS).glob("step-*"):
        if step is None or int(checkpoint.name.removeprefix("step-")) > step:
            shutil.rmtree(checkpoint, ignore_errors=True)
    kept = initial if step is None else [row for row in _written_rows(scratch / METRICS) if row["step"] <= step]
    (scratch / METRICS).write_text("".join(json.dumps(row) + "\n" for row in kept))


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
        # From the step's process starting to its first training step done: start-up,
        # loading, and compiling (which JAX's compilation cache spares a run of known shapes);
        # and the CPU time the process spent until then, which other work on the machine
        # does not inflate.
        "time_to_first_step_s": round(trained[0]["time"] - started, 2) if trained else None,
        "cpu_to_first_step_s": trained[0].get("process_cpu_s") if trained else None,
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
    # One step's trainer (evaluating every step), through the same schema as train_lm's. By
    # default in the batches of the training's own evaluation: Levanter's bits per byte is a
    # mean of each batch's, so other batches give (slightly) other bits per byte.
    batch_size = attrs["batch_size"] or trained.get("evaluation", {}).get("batch_size") or _EVAL_BATCH_SIZE
    trainer = {"steps": 1, "batch_size": batch_size, "max_eval_batches": attrs["max_batches"]}
    config = levanter_eval_lm.EvalLmConfig(
        checkpoint_path=f"{model}/checkpoint",
        data=data_config(sets, {tag: 1.0 for tag in sets}, tokenizer),
        model=model_config(trained["model"], tokenizer, tmp),
        trainer=trainer_config(trainer, 0, None, metrics, tmp / "levanter-logs"),
    )
    with quiet_tokenizer_name():  # rules/library_patches.py says why
        levanter_eval_lm.main(config)
    _trackers(config.trainer.tracker)[MetricsFileConfig].tracker.finish()
    row = read_metrics(metrics)[-1]

    def scores(prefix: str) -> dict[str, float]:
        loss = row[f"{prefix}/loss"]
        return {"loss": loss, "bpb": row.get(f"{prefix}/bpb"), "perplexity": math.exp(loss)}

    return {**scores("eval"), "sets": {tag: scores(f"eval/{tag}") for tag in sets}}


# -- Hugging Face checkpoints: export_hf, train_lm(init_from_hf) ---------------------------

# Model fields each family's Hugging Face model cannot hold once set (true, or not 0):
# Levanter refuses to export a Llama's extra norms, `use_bias` puts biases on the norms too
# (which no config.json has a field for), and no Hugging Face Mixtral has shared experts.
_NOT_IN_HF = {
    "llama": ("hybrid_norm", "input_embedding_norm", "use_qk_norm", "use_bias"),
    "mixtral": ("input_embedding_norm", "use_bias", "n_shared_experts"),
    "qwen": ("input_embedding_norm", "use_bias"),
    "olmo2": ("use_bias",),
}
# The config.json fields that fix the weights' shapes and what they compute, and the model
# field (rules/lm_config.py) each one comes from; max_position_embeddings is not among
# them: a run may train on shorter or longer sequences than the checkpoint did.
_HF_ARCHITECTURE = {
    "hidden_size": "hidden_dim",
    "intermediate_size": "intermediate_dim",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads",
    "hidden_act": "activation_function",
    "rms_norm_eps": "layer_norm_epsilon",
    "tie_word_embeddings": "tie_word_embeddings",
    "rope_theta": "rope (not settable)",
    "rope_scaling": "rope (not settable)",
}
# ...and those of one family only.
_HF_ARCHITECTURE_OF = {
    "llama": {"head_dim": "head_dim", "attention_bias": "use_bias", "mlp_bias": "use_bias"},
    "mixtral": {"num_local_experts": "n_routed_experts", "num_experts_per_tok": "num_experts_per_tok"},
    "qwen": {},
    "olmo2": {"attention_bias": "attention_bias"},
}


def _not_in_hf(fields: Mapping[str, Any]) -> list[str]:
    """The fields of a resolved model dict that its family's Hugging Face model cannot hold."""
    family = lm_config.family(fields)
    unsupported = [
        name if isinstance(fields[name], bool) else f"{name} {fields[name]}"
        for name in _NOT_IN_HF[family.name]
        if fields[name]
    ]
    if fields.get("head_dim") not in (None, fields["hidden_dim"] // fields["num_heads"]):
        unsupported.append(f"head_dim {fields['head_dim']} (other than hidden_dim // num_heads)")
    return unsupported


def export(model: str, out: Path, tmp: Path) -> None:
    """A `train_lm` output or kept state (a directory or store URL) as a Hugging Face
    checkpoint in `out`, by Levanter's own export (`levanter.main.export_lm_to_hf`): its
    converter writes config.json, model.safetensors (in the checkpoint's float32) and the
    tokenizer the model was trained with, on the host's CPU; config.json is then written
    again as transformers writes it (`_standard_config`)."""
    try:
        record = json.loads(_read_text(f"{model}/{MODEL_FILE}"))
    except FileNotFoundError:
        raise StepFailed(f"no {MODEL_FILE} in the model's output: export_hf reads a train_lm target") from None
    fields = lm_config.resolve("model", record["model"])
    unsupported = _not_in_hf(fields)
    if unsupported:
        title = lm_config.family(fields).title
        raise StepFailed(f"the model has {', '.join(unsupported)}, which a Hugging Face {title} cannot hold")
    tokenizer = local_copy(f"{model}/{TOKENIZER_DIR}", tmp / "tokenizer")
    export_lm_to_hf.main(
        export_lm_to_hf.ConvertLmConfig(
            trainer=TrainerConfig(),  # unused on the CPU
            checkpoint_path=f"{model}/checkpoint",
            output_dir=str(out),
            model=model_config(fields, tokenizer, tmp),
            use_cpu=True,
        )
    )
    _standard_config(out)


# What Levanter's converter adds to config.json from the tokenizer that is no setting of a
# causal language model: an encoder-decoder's first decoder token, and tokens suppressed at
# the start of a generation (Whisper's), set to the tokenizer's BOS, EOS and padding.
_NOT_CAUSAL_LM_SETTINGS = ("decoder_start_token_id", "begin_suppress_tokens")


def _standard_config(out: Path) -> None:
    """config.json of the export in `out` as transformers' `save_pretrained` writes it: the
    model class in `architectures` (by which vLLM and other serving stacks pick the model's
    implementation: the class `AutoModelForCausalLM` maps the model_type to), and only the
    values that differ from the config class's defaults. Levanter's converter writes every
    field, `architectures` null, and generation settings nobody set (`max_length` 20,
    `top_k` 50, ...), which generation would take as the model's own. What the model does
    have, the tokenizer's BOS, EOS and padding tokens, stays; transformers derives its
    generation config from them, so no generation_config.json is written."""
    config = AutoConfig.from_pretrained(str(out), local_files_only=True)
    config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
    for name in _NOT_CAUSAL_LM_SETTINGS:
        setattr(config, name, None)
    config.save_pretrained(str(out))


def check_hf_base(location: str, fields: Mapping[str, Any], tokenizer: Path, tmp: Path) -> Path:
    """The local directory of the Hugging Face checkpoint at `location` that a run of model
    `fields` on data tokenized with `tokenizer` starts from (`init_from_hf`), once it is
    known to fit: of the model's family, with weights, of the same architecture (compared
    as Levanter's converter writes `fields` into a config.json), with the data's vocabulary."""
    family = lm_config.family(fields)
    unsupported = _not_in_hf(fields)
    if unsupported:
        raise StepFailed(
            f"model has {', '.join(unsupported)}: no Hugging Face {family.title} can start it (init_from_hf)"
        )
    local = local_copy(location, tmp / "hf-base")
    check_checkpoint(local, family.name, "init_from_hf")
    differ = architecture_differences(local, fields, tokenizer, tmp)
    if differ:
        shown = "; ".join(f"{difference} (model: {field})" for difference, field in differ)
        raise StepFailed(f"init_from_hf's config.json does not match this target's model: {shown}")
    vocabulary = Tokenizer.from_file(str(local / TOKENIZER)).get_vocab(with_added_tokens=True)
    if vocabulary != Tokenizer.from_file(str(tokenizer / TOKENIZER)).get_vocab(with_added_tokens=True):
        raise StepFailed(
            "init_from_hf's tokenizer is not the one the data was tokenized with: tokenize the data with "
            "hf_tokenizer(dir = <the checkpoint's label>)"
        )
    return local


def architecture_differences(
    checkpoint: Path, fields: Mapping[str, Any], tokenizer: Path, tmp: Path
) -> list[tuple[str, str]]:
    """Where the config.json of the Hugging Face checkpoint in `checkpoint` differs from what
    Levanter's converter writes for model `fields`: ("hidden_size 32 there, 64 here", the
    model field behind it) for each config.json field that fixes the weights' shapes or
    what they compute."""
    theirs = AutoConfig.from_pretrained(str(checkpoint), local_files_only=True).to_dict()
    ours = model_config(fields, tokenizer, tmp).to_hf_config(vocab_size=theirs["vocab_size"]).to_dict()
    family = lm_config.family(fields)
    return [
        (f"{name} {theirs.get(name)!r} there, {ours.get(name)!r} here", field)
        for name, field in {**_HF_ARCHITECTURE, **_HF_ARCHITECTURE_OF[family.name]}.items()
        if theirs.get(name) != ours.get(name)
    ]
