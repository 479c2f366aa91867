"""Levanter's configs made from a target's resolved dicts (rules/common/lm_config.py):
the model of each family, the optimizer, and the trainer.

Every value comes from the dicts, which the loader resolved against the schema: nothing
here declares a default of its own.
"""

from __future__ import annotations

import rules.common.levanter.environment  # noqa: F401  (first: offline, before Levanter)

import dataclasses
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
from levanter.checkpoint import CheckpointerConfig
from levanter.compat.hf_checkpoints import HFCompatConfig
from levanter.distributed import DistributedConfig, RayConfig
from levanter.layers.attention import AttentionBackend
from levanter.models.llama import LlamaConfig
from levanter.models.mixtral import MixtralConfig
from levanter.models.olmo import Olmo2Config
from levanter.models.qwen import QwenConfig
from levanter.optim import AdamConfig
from levanter.tracker.tracker import TrackerConfig
from levanter.trainer import TrainerConfig
from levanter.utils.activation import ActivationFunctionEnum

from rules.common import lm_config
from rules.common.levanter.optim import RuntimePeakAdamConfig
from rules.common.levanter.trackers import TIMING_FILE, MetricsFileConfig, StepFn

# Levanter's config class of each model family.
CONFIG_CLASSES: dict[str, type[HFCompatConfig]] = {
    "llama": LlamaConfig,
    "mixtral": MixtralConfig,
    "qwen": QwenConfig,
    "olmo2": Olmo2Config,
}


def model_config(fields: Mapping[str, Any], tokenizer: Path, tmp: Path) -> HFCompatConfig:
    """The Levanter config of a model dict (a model.json of an older output may lack fields
    added since: they are resolved here), with a local tokenizer and Hugging Face
    reference, never the Hub. The reference, where the export takes its config defaults
    and tokenizer from, is the tokenizer next to a config.json naming the family's
    Hugging Face architecture."""
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


@dataclasses.dataclass(frozen=True)
class TrainerSettings:
    """What Levanter's trainer is made from: a `trainer` dict (train_lm's, or the one-step
    trainer an evaluation makes), where its metrics go (`metrics`, each row also to
    `on_step`, and to `trackers` such as W&B) and its logs (`log_dir`), where its
    checkpoints go (`checkpoints`: with no run id in the path, so the next attempt of the
    same key finds them), the steps it keeps besides the last (`kept`), and a Levanter
    checkpoint it continues from when it has none of its own yet (`initialize_from`).
    `distributed`: this process already joined JAX distributed (a multi-host step)."""

    trainer: Mapping[str, Any]
    metrics: Path
    log_dir: Path
    seed: int = 0
    checkpoints: Path | None = None
    distributed: bool = False
    trackers: Sequence[TrackerConfig] = ()
    on_step: StepFn | None = None
    kept: Sequence[int] = ()
    initialize_from: str | None = None


def trainer_config(settings: TrainerSettings) -> TrainerConfig:
    """Levanter's trainer on whatever devices this process sees, without a Ray cluster.

    Checkpoints every `checkpoint_interval` steps and at the last step (so the output
    always holds the final state). Levanter numbers steps from 0 and never saves at step
    0, hence at least 2 steps."""
    trainer = lm_config.resolve("trainer", settings.trainer)
    steps, batch_size = trainer["steps"], trainer["batch_size"]
    keep = _checkpoint_policy(trainer["checkpoint_interval"], steps - 1, settings.kept)
    metrics_file = MetricsFileConfig(path=str(settings.metrics), timing_path=str(settings.log_dir / TIMING_FILE))
    metrics_file.on_step = settings.on_step
    trackers = settings.trackers
    return TrainerConfig(
        seed=settings.seed,
        id="train",
        log_dir=settings.log_dir,
        tracker=(metrics_file, *trackers) if trackers else metrics_file,
        num_train_steps=steps,
        train_batch_size=batch_size,
        per_device_eval_parallelism=max(1, batch_size // jax.device_count()),
        steps_per_eval=trainer["eval_interval"],
        max_eval_batches=trainer["max_eval_batches"],
        checkpointer=CheckpointerConfig(
            base_path=str(settings.checkpoints or settings.log_dir / "checkpoints"),
            keep=keep,
            append_run_id_to_base_path=False,
        ),
        initialize_from=settings.initialize_from,
        ray=RayConfig(auto_start_cluster=False),
        # A multi-host step's processes joined JAX distributed before Levanter starts.
        distributed=DistributedConfig(initialize_jax_distributed=not settings.distributed),
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
