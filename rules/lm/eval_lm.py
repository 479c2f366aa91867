"""`eval_lm`'s step: loss, bits per byte and perplexity of a trained model on tokenized
sets, by Levanter's own `eval_lm`."""

from __future__ import annotations

import rules.common.levanter.environment  # noqa: F401  (first: offline, before Levanter)

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from levanter.main import eval_lm as levanter_eval_lm

from marinbuild.targets.context import StepFailed
from rules.common.levanter.configs import TrainerSettings, model_config, trainer_config
from rules.common.levanter.data import data_config, read_text, tokenized_sets, tokenizer_digest
from rules.common.levanter.library_patches import quiet_tokenizer_name
from rules.common.levanter.metrics import read_rows
from rules.common.levanter.trackers import MetricsFileConfig
from rules.common.levanter.training import trackers_by_type
from rules.common.training_files import CHECKPOINT, METRICS, MODEL_FILE

# The batch size for a model whose model.json predates its `evaluation` field.
_EVAL_BATCH_SIZE = 8


def evaluate(model: str, data: Mapping[str, str], attrs: Mapping[str, Any], tmp: Path) -> dict[str, Any]:
    """metrics.json of `eval_lm`: the `train_lm` output or kept state at `model` (a directory
    or store URL, its checkpoint read where it is) on each tokenized set of `data`."""
    sets, tokenizer = tokenized_sets(data, tmp)
    trained = json.loads(read_text(f"{model}/{MODEL_FILE}"))
    if trained["tokenizer_blake3"] != tokenizer_digest(tokenizer):
        raise StepFailed("the data sets were tokenized with another tokenizer than the model was trained with")
    metrics = tmp / METRICS
    # One step's trainer, evaluating at it, by default in the batches of the training's own
    # evaluation: Levanter's bits per byte is a mean of each batch's, so other batches give
    # (slightly) other bits per byte.
    batch_size = attrs["batch_size"] or trained.get("evaluation", {}).get("batch_size") or _EVAL_BATCH_SIZE
    trainer = {"steps": 1, "batch_size": batch_size, "max_eval_batches": attrs["max_batches"]}
    config = levanter_eval_lm.EvalLmConfig(
        checkpoint_path=f"{model}/{CHECKPOINT}",
        data=data_config(sets, {tag: 1.0 for tag in sets}, tokenizer),
        model=model_config(trained["model"], tokenizer, tmp),
        trainer=trainer_config(TrainerSettings(trainer, metrics, tmp / "levanter-logs")),
    )
    with quiet_tokenizer_name():  # library_patches.py says why
        levanter_eval_lm.main(config)
    trackers_by_type(config.trainer.tracker)[MetricsFileConfig].tracker.finish()
    row = read_rows(metrics)[-1]

    def scores(prefix: str) -> dict[str, float]:
        loss = row[f"{prefix}/loss"]
        return {"loss": loss, "bpb": row.get(f"{prefix}/bpb"), "perplexity": math.exp(loss)}

    return {**scores("eval"), "sets": {tag: scores(f"eval/{tag}") for tag in sets}}
