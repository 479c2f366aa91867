"""Language-model rules: `train_lm` and `eval_lm`, on Levanter.

The rules are declared here, cheap to import; the schema of `model`, `optimizer` and
`trainer`, with their defaults, is `rules/lm_config.py`; the Levanter side (configs,
metrics, the runs) is `rules/levanter_lm.py`, imported only when a step runs. Macros
for model and resource dicts (`llama_nano()`, `llama(...)`, `cpu()`, `gpu(...)`,
`tpu(...)`) are in `rules/lm.star`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.context import Context
from marinbuild.targets.rule import Execution, Resources, RetryPolicy, Rule
from rules import lm_config

ML_PACKAGES = ("jax", "jaxlib", "levanter", "haliax", "optax")
# What Weights & Biases reads from the environment, passed to a training's steps (values of
# names that look secret, WANDB_API_KEY, are not recorded in the attempt).
WANDB_ENV = (
    "WANDB_MODE",
    "WANDB_API_KEY",
    "WANDB_BASE_URL",
    "WANDB_DIR",
    "WANDB_PROJECT",
    "WANDB_ENTITY",
    "WANDB_CONFIG_DIR",
    "WANDB_CACHE_DIR",
    "WANDB_DATA_DIR",
    "WANDB_SILENT",
    "WANDB_CONSOLE",
)
# The fields of `tracker = {"type": "wandb", ...}` (those of Levanter's WandbConfig).
_WANDB_FIELDS = {"project": str, "entity": str, "name": str, "group": str, "tags": list, "mode": str}
_WANDB_MODES = ("online", "offline", "disabled")
# Model sizes that must be positive (Levanter would fail on them only once the step runs).
_MODEL_SIZES = ("seq_len", "hidden_dim", "intermediate_dim", "num_layers", "num_heads", "num_kv_heads")


class _Shown(dict):
    """Values for a headline template: numbers to 3 decimals, '?' for what is missing."""

    def __missing__(self, key: str) -> str:
        return "?"


def _headline(path: Path, template: str) -> str | None:
    try:
        values = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return template.format_map(
        _Shown({key: f"{value:.3f}" if isinstance(value, float) else value for key, value in values.items()})
    )


def _train_headline(out: Path) -> str | None:
    return _headline(
        out / "summary.json",
        "eval loss {eval_loss} (at initialisation {initial_eval_loss}), {steps} steps, {tokens} tokens; "
        "model in checkpoint/ and hf/, metrics in metrics.jsonl",
    )


def _eval_headline(out: Path) -> str | None:
    return _headline(out / "metrics.json", "eval loss {loss}, {bpb} bits/byte, perplexity {perplexity} (metrics.json)")


def _validate_train(attrs: Mapping[str, JsonValue]) -> None:
    """Checks across fields; their names and types were checked against rules/lm_config.py."""
    trainer, model = attrs["trainer"], attrs["model"]
    for name, value in trainer.items():
        if value is not None and value <= 0:
            raise ValueError(f"trainer: {name} must be positive, got {value!r}")
    if trainer["steps"] < 2:
        raise ValueError("trainer: steps must be at least 2 (Levanter never checkpoints its step 0)")
    for name in _MODEL_SIZES:
        if model[name] <= 0:
            raise ValueError(f"model: {name} must be positive, got {model[name]!r}")
    if model["num_heads"] % model["num_kv_heads"]:
        raise ValueError(
            f"model: num_heads ({model['num_heads']}) must be a multiple of num_kv_heads ({model['num_kv_heads']})"
        )
    _validate_tracker(attrs["tracker"])


def _validate_tracker(tracker: JsonValue) -> None:
    """None, "wandb", or {"type": "wandb", "project": ..., "entity": ..., ...}."""
    if tracker is None or tracker == "wandb":
        return
    if not isinstance(tracker, dict) or tracker.get("type") != "wandb":
        raise ValueError(
            f'tracker: expected "wandb" or {{"type": "wandb", "project": ..., "entity": ...}}, got {tracker!r}'
        )
    for name, value in tracker.items():
        if name == "type" or value is None:
            continue
        if name not in _WANDB_FIELDS:
            raise ValueError(f"tracker: unknown field {name!r}; known: type, {', '.join(_WANDB_FIELDS)}")
        if not isinstance(value, _WANDB_FIELDS[name]):
            raise ValueError(f"tracker: {name} must be a {_WANDB_FIELDS[name].__name__}, got {value!r}")
    if tracker.get("mode") not in (None, *_WANDB_MODES):
        raise ValueError(f"tracker: mode must be one of {', '.join(_WANDB_MODES)}, got {tracker['mode']!r}")


_CHECKPOINT = re.compile(r"checkpoints/step-(\d+)/metadata\.json")


def _resume_point(files: Sequence[str]) -> str | None:
    """The newest complete Levanter checkpoint in a training's scratch space (its
    metadata.json is written last). The run may resume one checkpoint earlier if a kill
    came between that checkpoint and its step's metrics line (levanter_lm.py)."""
    steps = [int(match.group(1)) for name in files if (match := _CHECKPOINT.fullmatch(name))]
    return f"the checkpoint at step {max(steps)}" if steps else None


def _train_lm(ctx: Context) -> None:
    started = time.time()
    from marinbuild.cluster.distributed import initialize_jax

    initialize_jax(ctx.distributed)  # one process per host of a multi-host run: before JAX starts
    from rules import levanter_lm

    ctx.log.info("training; checkpoints in %s", ctx.scratch)
    data = {label: ctx.url(label) for label in ctx.inputs}
    run = levanter_lm.RunInfo(ctx.label, ctx.key, ctx.progress, ctx.log)
    trained = levanter_lm.train(
        ctx.attrs, data, ctx.out, ctx.scratch, ctx.tmp, ctx.distributed is not None, run, started
    )
    ctx.measure(**trained.measured)
    ctx.log.info("summary: %s; this attempt: %s", trained.summary, trained.measured)


train_lm = Rule(
    name="train_lm",
    impl=_train_lm,
    doc="Train a Llama language model with Levanter; outputs checkpoint/, hf/, metrics.jsonl, summary.json.",
    attrs={
        "data": Attr(types.MIXTURE, doc="A tokenize target, or a mixture {label: weight} of them."),
        # Checked and completed with their defaults at load time (rules/lm_config.py).
        "model": Attr(lm_config.MODEL, doc="LlamaConfig fields, e.g. llama_nano() from //rules:lm.star."),
        "optimizer": Attr(
            lm_config.OPTIMIZER,
            default=lm_config.resolve("optimizer", {}),
            doc="AdamConfig fields (learning_rate, weight_decay, warmup...).",
        ),
        "trainer": Attr(
            lm_config.TRAINER, doc="steps, batch_size, eval_interval, checkpoint_interval, max_eval_batches."
        ),
        "seed": Attr(types.INT, default=0),
        # Where the run also logs: not what it computes, so not part of the key.
        "tracker": Attr(
            types.JSON,
            default=None,
            identity=False,
            doc='None (the metrics file only), "wandb", or {"type": "wandb", "project": ..., "entity": ..., '
            '"mode": "offline", ...}: wandb(...) from //rules:lm.star.',
        ),
    },
    validate=_validate_train,
    headline=_train_headline,
    execution=Execution.SUBPROCESS,
    resources=Resources(cpu=2, memory_gb=4),
    resumable=True,
    reads_urls=True,
    # A preempted or killed run resumes from its checkpoints in the key's scratch.
    retry=RetryPolicy(worker_lost=10),
    multi_host=True,
    packages=ML_PACKAGES,
    env=WANDB_ENV,
    code_modules=("rules.levanter_lm", "rules.levanter_optim", "rules.levanter_trackers", "rules.lm_config"),
    metrics_file="summary.json",
    resume_point=_resume_point,
    # Bit-identical on CPU with a fixed seed, but not promised across machines and XLA versions.
    check_metrics={
        "steps": 0.0,
        "tokens": 0.0,
        "train_loss": 1e-3,
        "initial_eval_loss": 1e-3,
        "eval_loss": 1e-3,
        "eval_bpb": 1e-3,
    },
)


def _validate_eval(attrs: Mapping[str, JsonValue]) -> None:
    if not attrs["data"]:
        raise ValueError("data: name at least one tokenize target to evaluate on")


def _eval_lm(ctx: Context) -> None:
    from rules import levanter_lm

    model = ctx.attrs["model"]
    data = {label: ctx.url(label) for label in ctx.attrs["data"]}
    metrics = levanter_lm.evaluate(ctx.url(model), data, ctx.attrs, ctx.tmp)
    (ctx.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    ctx.log.info("metrics: %s", metrics)


eval_lm = Rule(
    name="eval_lm",
    impl=_eval_lm,
    doc="Validation loss, bits per byte and perplexity of a train_lm model on tokenized sets -> metrics.json.",
    headline=_eval_headline,
    validate=_validate_eval,
    attrs={
        "model": Attr(types.LABEL, doc="A train_lm target."),
        "data": Attr(types.LABEL_LIST, doc="tokenize targets whose validation split is evaluated."),
        "batch_size": Attr(
            types.INT, default=None, doc="None: the batch size the model was trained (and evaluated) with."
        ),
        "max_batches": Attr(types.INT, default=None, doc="At most this many batches per set (None: all)."),
    },
    execution=Execution.SUBPROCESS,
    resources=Resources(cpu=2, memory_gb=4),
    reads_urls=True,
    packages=ML_PACKAGES,
    code_modules=("rules.levanter_lm", "rules.levanter_optim", "rules.levanter_trackers", "rules.lm_config"),
    metrics_file="metrics.json",
)
