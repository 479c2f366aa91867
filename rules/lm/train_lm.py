"""`train_lm`'s step: a `TrainRequest` (what the target asks for, and where it runs) made
into Levanter's `TrainLmConfig` and trained through the runtime's one training loop
(rules/common/levanter/training.py)."""

from __future__ import annotations

import rules.common.levanter.environment  # noqa: F401  (first: offline, before Levanter)

import dataclasses
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from levanter.main import train_lm as levanter_train_lm

from marinbuild.targets.context import StepFailed
from rules.common import lm_config
from rules.common.levanter.configs import model_config, optimizer_config, trainer_config
from rules.common.levanter.data import data_config, read_text, tokenized_sets, tokenizer_digest
from rules.common.levanter.hf_export import check_hf_base
from rules.common.levanter.kept_states import PublishFn
from rules.common.levanter.trackers import tracker_fields, wandb_config
from rules.common.levanter.training import Places, RunInfo, Trained, Training, in_scratch, launch_train_lm, run_training
from rules.common.training_files import CHECKPOINT, METRICS, MODEL_FILE, written_rows


@dataclasses.dataclass(frozen=True)
class TrainRequest:
    """One train_lm step: the target's `attrs`, the location (a directory or store URL) of
    each data label they name (`data`), and where it works. With `run`, progress lines and
    the W&B tracker the target asks for. `distributed`: one process of a multi-host run,
    already in JAX distributed. `init`: where the kept state it continues from lies (its
    checkpoint, model.json and metrics: `init_from` at `init_step`); `init_hf`: where the
    Hugging Face checkpoint whose weights it starts from lies (`init_from_hf`). `publish`
    is handed each kept state as soon as it is written; `summary_extra` is added to
    summary.json (the weights a `mixture` target gave, as columns)."""

    attrs: Mapping[str, Any]
    data: Mapping[str, str]
    places: Places
    run: RunInfo | None = None
    distributed: bool = False
    started: float | None = None
    init: str | None = None
    init_hf: str | None = None
    publish: PublishFn | None = None
    summary_extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def train_config(
    request: TrainRequest, sets: Mapping[str, str], tokenizer: Path, base: Path | None = None
) -> levanter_train_lm.TrainLmConfig:
    """Levanter's config for the request, on the tokenized `sets` and their local
    `tokenizer`; `base`: the local Hugging Face checkpoint it starts from (checked by
    `check_hf_base`), loaded by Levanter's converter."""
    attrs = lm_config.resolve_attrs(request.attrs)
    mixture = attrs["data"]
    weights = dict(zip(sets, mixture.values())) if isinstance(mixture, dict) else {tag: 1.0 for tag in sets}
    wandb = tracker_fields(attrs.get("tracker"))
    run = request.run
    trackers = [wandb_config(wandb, run.key, run.label)] if wandb is not None and run is not None else []
    settings = dataclasses.replace(
        in_scratch(attrs["trainer"], attrs["seed"], request.places, run),
        distributed=request.distributed,
        trackers=trackers,
        kept=attrs.get("keep_checkpoints") or (),
        initialize_from=None if request.init is None else f"{request.init}/{CHECKPOINT}",
    )
    return levanter_train_lm.TrainLmConfig(
        data=data_config(sets, weights, tokenizer),
        model=model_config(attrs["model"], tokenizer, request.places.tmp),
        optimizer=optimizer_config(attrs["optimizer"]),
        trainer=trainer_config(settings),
        initialize_from_hf=False if base is None else str(base),
    )


def train(request: TrainRequest) -> Trained:
    """Train (or resume) into the scratch space, then write the outputs of `train_lm`."""
    started = request.started or time.time()
    tmp = request.places.tmp
    attrs = lm_config.resolve_attrs(request.attrs)  # model.json records the effective model config
    sets, tokenizer = tokenized_sets(request.data, tmp)
    base = None if request.init_hf is None else check_hf_base(request.init_hf, attrs["model"], tokenizer, tmp)
    config = train_config(request, sets, tokenizer, base)
    trained = run_training(
        Training(
            config=config,
            launch=lambda: launch_train_lm(config),
            recorded=attrs,
            tokenizer=tokenizer,
            places=request.places,
            started=started,
            distributed=request.distributed,
            log=None if request.run is None else request.run.log,
            publish=request.publish,
            summary_extra=request.summary_extra,
            initial=[] if request.init is None else _initial_rows(request.init, tokenizer),
        )
    )
    if request.init is not None:
        trained.measured["continued_from_step"] = attrs["init_step"]
    return trained


def _initial_rows(init: str, tokenizer: Path) -> list[dict[str, Any]]:
    """The metrics of the run a continuation starts from, up to its kept state: they begin
    its own `metrics.jsonl`, so that it holds the whole history of the weights it ends with
    (and the summary its initial evaluation). Its tokenizer must be the data's."""
    trained = json.loads(read_text(f"{init}/{MODEL_FILE}"))
    if trained["tokenizer_blake3"] != tokenizer_digest(tokenizer):
        raise StepFailed("init_from was trained on data tokenized with another tokenizer than this run's data")
    return written_rows(read_text(f"{init}/{METRICS}"))
