"""The language-model rules: `train_lm` and `eval_lm` on Levanter, and Hugging Face
checkpoints out (`export_hf`) and in (`hf_model`).

Declared here, cheap to import: the schema of `model`, `optimizer` and `trainer` is
rules/common/lm_config.py; each step's code (train_lm.py, eval_lm.py, hf_model.py, and the
Levanter runtime of rules/common/levanter/) is imported when it runs. The macros for
model, resource and tracker dicts and for cooldowns are rules/lm/lm.star.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, AttrError, JsonValue
from marinbuild.targets.context import Context
from marinbuild.targets.outputs import Curves
from marinbuild.targets.rule import Execution, ReadScratch, Resources, RetryPolicy, Rule, StepInput, checkpoint_name
from rules.common import lm_config
from rules.common.corpus import SUMMARY
from rules.common.flops import train_lm_flops
from rules.common.headline import json_headline, summary_headline
from rules.common.hub import ALLOW_UNPINNED, HUB_ENV, NO_TORCH, check_pinned
from rules.common.training_files import METRICS, resume_step
from rules.lm.constants import EVAL_METRICS, LEVANTER_MODULES, ML_PACKAGES, WANDB_ENV

# The fields of `tracker = {"type": "wandb", ...}` (those of Levanter's WandbConfig).
_WANDB_FIELDS = {"project": str, "entity": str, "name": str, "group": str, "tags": list, "mode": str}
_WANDB_MODES = ("online", "offline", "disabled")


def _train_headline(out: Path) -> str | None:
    return summary_headline(
        out / SUMMARY,
        "eval loss {eval_loss} (at initialisation {initial_eval_loss}), {steps} steps, {tokens} tokens; "
        "model in checkpoint/ (export_hf for Hugging Face), metrics in metrics.jsonl",
    )


def _eval_headline(out: Path) -> str | None:
    return summary_headline(
        out / EVAL_METRICS, "eval loss {loss}, {bpb} bits/byte, perplexity {perplexity} (metrics.json)"
    )


def evaluated_by(overall: Mapping[str, Any], parts: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """An evaluation's numbers by what was evaluated (`Rule.evaluated`): each part's (a data
    set, a task), and those over all of them under the parts' names joined by "+" (for one
    part, one name: the overall numbers, which a part's may differ from in the last digits)."""
    found = {"+".join(parts): dict(overall)}
    for name, values in parts.items():
        found[name] = {**values, **found.get(name, {})}  # one part: its overall numbers, as the headline's
    return found


def _eval_evaluated(metrics: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """eval_lm's metrics.json by data set: `sets` holds each set's numbers under its tag (the
    target's name, `tokenized_sets` of the runtime), the top level those over all of them."""
    sets = metrics.get("sets")
    overall = {name: value for name, value in metrics.items() if name != "sets"}
    return evaluated_by(overall, sets if isinstance(sets, dict) else {})


def _steps_of(part: int | float, steps: int) -> int:
    """The steps of a run of `steps` that a warmup or decay takes, as Levanter counts them
    (`_convert_frac_or_steps`): a fraction of them, or a number of steps."""
    return int(part * steps) if part <= 1 else int(part)


def check_schedule(attrs: Mapping[str, JsonValue]) -> None:
    """The learning-rate schedule of a training (train_lm, sft_lm) fits in its steps: the
    warmup and the decay together take no more than the run, and a cosine decay at least
    one step (Levanter fails on it in the worker otherwise). The ranges of each field were
    checked by the schema (rules/common/ranges.py); the parts of a run in cycles are parts of
    each cycle, left to Levanter."""
    optimizer, steps = attrs["optimizer"], attrs["trainer"]["steps"]
    if optimizer["cycles"] is not None or optimizer["cycle_length"] is not None:
        return
    warmup = _steps_of(optimizer["warmup"], steps)
    decay = None if optimizer["decay"] is None else _steps_of(optimizer["decay"], steps)
    if warmup + (decay or 0) > steps:
        parts = f"warmup ({optimizer['warmup']!r}: {warmup} steps)" + (
            " takes" if decay is None else f" and decay ({optimizer['decay']!r}: {decay} steps) take"
        )
        raise ValueError(f"optimizer: {parts} more than the run's {steps} steps (trainer: steps)")
    if optimizer["lr_schedule"] == "cosine" and (steps - warmup if decay is None else decay) == 0:
        raise ValueError(
            f"optimizer: the decay takes none of the run's {steps} steps (warmup {optimizer['warmup']!r}: "
            f"{warmup} steps, decay {optimizer['decay']!r}), and Levanter's cosine schedule needs at least one"
        )


def _validate_train(attrs: Mapping[str, JsonValue]) -> None:
    """Checks across fields; their names and types were checked against the schema."""
    check_schedule(attrs)
    _validate_mixture(attrs)
    lm_config.check_model(attrs["model"])
    _validate_tracker(attrs["tracker"])
    _validate_checkpoints(attrs)


def _validate_mixture(attrs: Mapping[str, JsonValue]) -> None:
    """`data` weighs its sources, or lists them for `mixture` to weigh: never both, never neither."""
    listed = isinstance(attrs["data"], list)
    if attrs["mixture"] is not None and not listed:
        raise ValueError("mixture gives the weights of data's sources: make data the list of them, without weights")
    if attrs["mixture"] is None and listed:
        raise ValueError(
            "data lists sources without weights: give them weights ({label: weight}), or a mixture target "
            "(mixture = ...) whose mixture.json weighs them"
        )


def _validate_checkpoints(attrs: Mapping[str, JsonValue]) -> None:
    """keep_checkpoints: steps the run reaches, once each, in order; init_from with init_step,
    before this run's last step."""
    steps, kept = attrs["trainer"]["steps"], attrs["keep_checkpoints"]
    if not isinstance(kept, list) or any(isinstance(step, bool) or not isinstance(step, int) for step in kept):
        raise ValueError(f"keep_checkpoints: expected a list of steps (ints), got {kept!r}")
    if kept != sorted(set(kept)):
        raise ValueError(f"keep_checkpoints: list each step once, in increasing order, got {kept!r}")
    for step in kept:
        if not 1 <= step < steps:
            raise ValueError(
                f"keep_checkpoints: this run's steps are 0 to {steps - 1} and Levanter keeps none at step 0; got {step}"
            )
    if (attrs["init_from"] is None) != (attrs["init_step"] is None):
        raise ValueError("init_from and init_step go together: the run to continue, and the step of its checkpoint")
    if attrs["init_from"] is not None and attrs["init_from_hf"] is not None:
        raise ValueError(
            "give one of init_from (a train_lm run to continue, with its optimizer state) and init_from_hf "
            "(a Hugging Face checkpoint's weights to start from)"
        )
    start = attrs["init_step"]
    if start is not None and not start + 1 < steps:
        raise ValueError(
            f"trainer: steps ({steps}) counts from the start of init_from's run, which this one continues "
            f"after its step {start}: it must be more than {start + 1}"
        )


def _check_continuation(attrs: Mapping[str, JsonValue], base: Mapping[str, JsonValue]) -> None:
    """A run continues from another's checkpoint (model, optimizer state, step, data position):
    the same model, the same batch size, and the same peak learning rate, which the
    optimizer state holds (the schedule after it is this run's own)."""
    model, base_model = attrs["model"], base["model"]
    differ = [name for name in {**base_model, **model} if model.get(name) != base_model.get(name)]
    if differ:
        shown = ", ".join(f"{name} {model.get(name)!r} here, {base_model.get(name)!r} there" for name in differ)
        raise AttrError(
            f"init_from was trained with another model ({shown})", hint="continue it with the same model config"
        )
    for group, name in (("trainer", "batch_size"), ("optimizer", "learning_rate")):
        mine, theirs = attrs[group][name], base[group][name]
        if mine != theirs:
            raise AttrError(
                f"{group}: {name} is {mine!r} here but {theirs!r} in init_from's run, whose checkpoint it continues",
                hint=f"give it the same {name}; the wsd_cooldowns macro of //rules/lm:lm.star does",
            )


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


def resume_point(files: Sequence[str], read: ReadScratch) -> str | None:
    """Where a training would resume, in words, given its scratch space's files and `read`
    of one: the checkpoint `resume_step` picks, the one the run restores (rules/common/training_files.py)."""
    step = resume_step(files, read)
    return None if step is None else f"the checkpoint at step {step}"


# What every rule that trains through Levanter's loop declares alike (train_lm, sft_lm): the
# optimizer, the trainer and the seed, and how its steps run, resume and are checked.
TRAINING_ATTRS: dict[str, Attr] = {
    "optimizer": Attr(
        lm_config.OPTIMIZER,
        default=lm_config.resolve("optimizer", {}),
        doc="AdamConfig fields (learning_rate, weight_decay, warmup...).",
    ),
    "trainer": Attr(lm_config.TRAINER, doc="steps, batch_size, eval_interval, checkpoint_interval, max_eval_batches."),
    "seed": Attr(types.INT, default=0),
}
TRAINING_RUN: dict[str, Any] = {
    "execution": Execution.SUBPROCESS,
    "resources": Resources(cpu=2, memory_gb=4),
    "resumable": True,
    "reads_urls": True,
    # A preempted or killed run resumes from its checkpoints in the key's scratch.
    "retry": RetryPolicy(worker_lost=10),
    "metrics_file": SUMMARY,
    "curves": Curves(METRICS, ("train/loss", "eval/loss"), per_set="eval/*/loss"),
    "resume_point": resume_point,
    # Bit-identical on CPU with a fixed seed, but not promised across machines and XLA versions.
    "check_metrics": {
        "steps": 0.0,
        "tokens": 0.0,
        "train_loss": 1e-3,
        "initial_eval_loss": 1e-3,
        "eval_loss": 1e-3,
        "eval_bpb": 1e-3,
    },
}


def _train_lm(ctx: Context) -> None:
    started = time.time()
    from marinbuild.cluster.distributed import initialize_jax

    initialize_jax(ctx.distributed)  # one process per host of a multi-host run: before JAX starts
    from rules.common.levanter.training import Places, RunInfo
    from rules.lm.train_lm import TrainRequest, train

    ctx.log.info("training; checkpoints in %s", ctx.scratch)
    data, attrs, shown = ctx.attrs["data"], ctx.attrs, {}
    if ctx.attrs["mixture"] is not None:
        from rules.common.mixture_file import read_mixture, weight_columns, weights_for

        mixture = read_mixture(ctx.url(ctx.attrs["mixture"]))
        attrs = {**attrs, "data": weights_for(ctx.attrs["mixture"], mixture, data)}
        shown = weight_columns(mixture)
        ctx.log.info("mixture of %s: %s", ctx.attrs["mixture"], attrs["data"])
    init_from, init_step = ctx.attrs["init_from"], ctx.attrs["init_step"]
    trained = train(
        TrainRequest(
            attrs=attrs,
            data={label: ctx.url(label) for label in ([data] if isinstance(data, str) else data)},
            places=Places(ctx.out, ctx.scratch, ctx.tmp),
            run=RunInfo(ctx.label, ctx.key, ctx.progress, ctx.log),
            distributed=ctx.distributed is not None,
            started=started,
            init=None if init_from is None else ctx.url(checkpoint_name(init_from, init_step)),
            init_hf=None if ctx.attrs["init_from_hf"] is None else ctx.url(ctx.attrs["init_from_hf"]),
            publish=ctx.publish_checkpoint,
            summary_extra=shown,
        )
    )
    ctx.measure(**trained.measured)
    ctx.log.info("summary: %s; this attempt: %s", trained.summary, trained.measured)


train_lm = Rule(
    name="train_lm",
    # 2: checkpoints hold the learning-rate schedule's state and model.json the evaluation
    # settings (since 8f80818); a version-1 output is not what this code makes, and a
    # cooldown (`init_from`) could not restore its optimizer state.
    # 3: the output and each kept state hold tokenizer/ (what export_hf reads), and no hf/
    # (export_hf makes it, of the runs whose export is wanted).
    version=3,
    impl=_train_lm,
    doc="Train a language model (Llama, Mixtral, Qwen, OLMo 2) with Levanter; outputs checkpoint/, tokenizer/, "
    "metrics.jsonl, summary.json.",
    attrs={
        "data": Attr(
            types.MIXTURE,
            doc="A tokenize target, a mixture {label: weight} of them, or a list of them that `mixture` weighs.",
        ),
        "model": Attr(
            lm_config.MODEL,
            doc="A model family's config fields (LlamaConfig's without a family field), e.g. llama_nano() or "
            "mixtral(...) from //rules/lm:lm.star.",
        ),
        **TRAINING_ATTRS,
        # Left out of the key while unset, so that outputs trained before they existed keep theirs.
        "keep_checkpoints": Attr(
            types.JSON,
            default=[],
            omit_default=True,
            doc="Steps whose checkpoints the run keeps, each an entry of its own with model.json and the "
            "metrics up to it; each is readable (eval_lm(step = k), train_lm(init_step = k)) once written.",
        ),
        "mixture": Attr(
            types.OPTIONAL_LABEL,
            default=None,
            omit_default=True,
            doc="A target whose mixture.json weighs data's sources (a swarm's draw, fit_mixture's proposal: "
            "//rules/mixtures:mixtures.star); its weights are shown in summary.json as weight.<source>.",
        ),
        "init_from": Attr(
            types.OPTIONAL_LABEL,
            default=None,
            omit_default=True,
            doc="A train_lm target whose checkpoint at init_step this run continues from, with its own schedule "
            "(a cooldown): model, optimizer state, step and data position.",
        ),
        "init_step": Attr(types.INT, default=None, omit_default=True, doc="A step init_from keeps."),
        "init_from_hf": Attr(
            types.OPTIONAL_LABEL,
            default=None,
            omit_default=True,
            doc="A Hugging Face checkpoint (hf_model, export_hf) whose weights this run starts from, with an "
            "optimizer and schedule of its own from step 0: continued pretraining. Its architecture and "
            "tokenizer must be the model's and the data's.",
        ),
        # Where the run also logs: not what it computes, so not part of the key.
        "tracker": Attr(
            types.JSON,
            default=None,
            identity=False,
            doc='None (the metrics file only), "wandb", or {"type": "wandb", "project": ..., "entity": ..., '
            '"mode": "offline", ...}: wandb(...) from //rules/lm:lm.star.',
        ),
    },
    validate=_validate_train,
    headline=_train_headline,
    **TRAINING_RUN,
    flops=train_lm_flops,
    multi_host=True,
    packages=ML_PACKAGES,
    env=(*WANDB_ENV, NO_TORCH),
    code_modules=(*LEVANTER_MODULES, "rules.lm.train_lm"),
    keeps_checkpoints="keep_checkpoints",
    step_inputs={"init_from": StepInput("init_step", "a train_lm target that keeps that step", _check_continuation)},
)


def kept_step(done: str, *, omit_default: bool = False) -> Attr:
    """The `step` of a rule that reads a train_lm model: its last step by default, or a step
    it keeps, which the rule may read as soon as the training writes it. `omit_default`
    keeps the attribute out of the key while it is None (the evaluations'; export_hf's
    has always been in its key)."""
    return Attr(
        types.INT,
        default=None,
        omit_default=omit_default,
        doc=f"None: the model's last step; else a step it keeps (keep_checkpoints), {done} once written.",
    )


def check_kept_step(attrs: Mapping[str, JsonValue]) -> None:
    """`step` of a reader of a kept state (eval_lm, export_hf): None or a step Levanter can keep."""
    if attrs["step"] is not None and attrs["step"] < 1:
        raise ValueError(f"step: Levanter keeps no checkpoint at step {attrs['step']}; name a step the model keeps")


def _validate_eval(attrs: Mapping[str, JsonValue]) -> None:
    if not attrs["data"]:
        raise ValueError("data: name at least one tokenize target to evaluate on")
    check_kept_step(attrs)


def _eval_lm(ctx: Context) -> None:
    from rules.lm.eval_lm import evaluate

    model, step = ctx.attrs["model"], ctx.attrs["step"]
    data = {label: ctx.url(label) for label in ctx.attrs["data"]}
    where = ctx.url(model if step is None else checkpoint_name(model, step))
    metrics = evaluate(where, data, ctx.attrs, ctx.tmp)
    (ctx.out / EVAL_METRICS).write_text(json.dumps(metrics, indent=2) + "\n")
    ctx.log.info("metrics: %s", metrics)


eval_lm = Rule(
    name="eval_lm",
    impl=_eval_lm,
    doc="Validation loss, bits per byte and perplexity of a train_lm model on tokenized sets -> metrics.json.",
    headline=_eval_headline,
    evaluated=_eval_evaluated,
    validate=_validate_eval,
    attrs={
        "model": Attr(types.LABEL, doc="A train_lm target."),
        "step": kept_step("evaluated", omit_default=True),
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
    env=(NO_TORCH,),
    code_modules=(*LEVANTER_MODULES, "rules.lm.eval_lm"),
    metrics_file=EVAL_METRICS,
    step_inputs={"model": StepInput("step", "a train_lm target that keeps that step")},
)


# -- Hugging Face checkpoints out and in -----------------------------------------------------


def _export_hf(ctx: Context) -> None:
    from rules.common.levanter.hf_export import export

    model, step = ctx.attrs["model"], ctx.attrs["step"]
    export(ctx.url(model if step is None else checkpoint_name(model, step)), ctx.out, ctx.tmp)


def _export_headline(out: Path) -> str | None:
    return "a Hugging Face checkpoint: config.json, model.safetensors, the tokenizer (AutoModelForCausalLM)"


export_hf = Rule(
    name="export_hf",
    impl=_export_hf,
    doc="A train_lm model (its last step, or a step it keeps) as a Hugging Face checkpoint: config.json, "
    "model.safetensors and the tokenizer, which transformers loads offline.",
    headline=_export_headline,
    validate=check_kept_step,
    attrs={
        "model": Attr(types.LABEL, doc="A train_lm target."),
        "step": kept_step("exported"),
    },
    execution=Execution.SUBPROCESS,
    resources=Resources(cpu=1, memory_gb=4),
    reads_urls=True,
    packages=(*ML_PACKAGES, "transformers", "safetensors"),
    env=(NO_TORCH,),
    code_modules=LEVANTER_MODULES,
    step_inputs={"model": StepInput("step", "a train_lm target that keeps that step")},
)


def _hf_model(ctx: Context) -> None:
    from rules.lm.hf_model import copy_checkpoint

    copy_checkpoint(ctx)


def _validate_hf_model(attrs: Mapping[str, JsonValue]) -> None:
    if (attrs["hub"] is None) == (attrs["dir"] is None):
        raise ValueError("give exactly one of hub (with revision) and dir")
    if attrs["hub"] is not None and attrs["revision"] is None:
        raise ValueError("a Hub checkpoint needs revision: the 40-hex commit id to use")
    if attrs["hub"] is None and attrs["revision"] is not None:
        raise ValueError("revision goes with hub; a dir checkpoint is identified by its files' digests")
    if attrs["family"] not in lm_config.FAMILIES:
        raise ValueError(
            f"family must be one of {list(lm_config.FAMILIES)} (the families train_lm trains), got {attrs['family']!r}"
        )
    check_pinned(attrs)


def _hf_model_headline(out: Path) -> str | None:
    return json_headline(
        out / SUMMARY,
        lambda summary: f"a {summary['family']} checkpoint in Hugging Face format ({', '.join(summary['files'])})",
    )


hf_model = Rule(
    name="hf_model",
    metrics_file=SUMMARY,
    impl=_hf_model,
    doc="A checkpoint in Hugging Face format as an input: from the Hub at a pinned commit, or from a target "
    "holding one (export_hf, a filegroup); checked (config.json of the family, tokenizer.json, safetensors "
    "weights whole and of the shapes config.json implies) and copied as it is, with summary.json.",
    headline=_hf_model_headline,
    validate=_validate_hf_model,
    attrs={
        "hub": Attr(types.STRING, default=None, doc="'org/name' of a model repository on the Hub."),
        "revision": Attr(types.STRING, default=None, doc="A 40-hex commit id (a branch needs allow_unpinned)."),
        "dir": Attr(types.OPTIONAL_LABEL, default=None, doc="A target or filegroup holding a checkpoint directory."),
        "family": Attr(
            types.STRING,
            default="llama",
            doc="Its model family (llama, mixtral, qwen, olmo2), whose Hugging Face model_type its config.json "
            "must say (qwen: qwen2).",
        ),
        "allow_unpinned": ALLOW_UNPINNED,
    },
    # 2: safetensors headers, index and shapes checked before publishing (issue #35): a
    # checkpoint cached before is checked again; one that passes gives the same bytes, so
    # nothing downstream reruns (early cutoff).
    version=2,
    execution=Execution.SUBPROCESS,
    env=HUB_ENV,
    packages=("huggingface_hub",),
    code_modules=("rules.common.hf_format", "rules.lm.hf_model"),
)
