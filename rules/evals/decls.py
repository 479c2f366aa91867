"""The benchmark rules, through lm-evaluation-harness: `mc_task` (a small multiple-choice
task made from local data) and `eval_harness` (lm-eval tasks on a model, run by Levanter).

A *local task* is a directory holding `task.yaml`, an lm-eval task config whose
`dataset_kwargs.data_files` name data files relative to it, beside those files (JSON
lines or Parquet, as `datasets.load_dataset` reads them): `mc_task` writes one, and a
filegroup of a hand-made one serves as well. A task of lm-eval's own (`arc_easy`) runs on
data given as a target too, `{"task": "arc_easy", "data": ":arc"}`, whose files
(`test.jsonl`, `validation-00000-of-00001.parquet`...) take the place of the Hub's.
Nothing is read from the Hub: the step runs with `HF_HUB_OFFLINE=1` and
`HF_DATASETS_OFFLINE=1`.

The results are `metrics.json`, flat numbers (`acc`, `acc_norm` averaged over the tasks,
and `<task>.acc`, `<task>.acc_norm`, `<task>.samples` for each), which `marinbuild show`,
`compare` and the report read as they read `eval_lm`'s. The key holds lm-eval's version
(`lm_eval_version`, set by marinbuild): its task configs and metrics are its code.

Declared here, cheap to import; the steps are mc_task.py and eval_harness.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, AttrType, JsonValue, LabelMap, absolute_label
from marinbuild.targets.context import Context
from marinbuild.targets.rule import Execution, Resources, Rule, StepInput, checkpoint_name
from rules.common.corpus import SUMMARY
from rules.common.headline import json_headline
from rules.common.hub import NO_TORCH
from rules.evals.constants import LM_EVAL_VERSION, METRICS, SPLIT_FILES, TASK_FILE, TASK_METRICS, TASK_NAME
from rules.lm.constants import LEVANTER_MODULES, ML_PACKAGES
from rules.lm.decls import check_kept_step, evaluated_by, kept_step

# -- mc_task --------------------------------------------------------------------------------


def _mc_task(ctx: Context) -> None:
    from rules.evals.mc_task import mc_task as make

    make(ctx)


def _validate_mc_task(attrs: Mapping[str, JsonValue]) -> None:
    for name, least in (("questions", 1), ("fewshot_examples", 1), ("context_lines", 1), ("choices", 2)):
        if attrs[name] < least:
            raise ValueError(f"{name} must be at least {least}, got {attrs[name]!r}")


def _mc_task_headline(out: Path) -> str | None:
    def describe(summary: Mapping[str, Any]) -> str:
        questions = summary["questions"]
        return (
            f"task {summary['task']}: {questions['test']} questions of {summary['choices']} choices, "
            f"{questions['train']} few-shot examples ({TASK_FILE}, {', '.join(SPLIT_FILES.values())})"
        )

    return json_headline(out / SUMMARY, describe)


mc_task = Rule(
    name="mc_task",
    metrics_file=SUMMARY,
    impl=_mc_task,
    doc="A small multiple-choice task for eval_harness from a corpus: which line comes next after a few lines "
    "of a document, among others of the corpus. Test questions from its validation split, few-shot examples "
    "from its train split, as JSON lines (test.jsonl, train.jsonl) with the lm-eval config task.yaml.",
    headline=_mc_task_headline,
    validate=_validate_mc_task,
    attrs={
        "data": Attr(types.LABEL, doc="A corpus target (a data rule's train/ and validation/ shards)."),
        "questions": Attr(types.INT, default=40, doc="Test questions, from the validation documents."),
        "fewshot_examples": Attr(types.INT, default=16, doc="Examples for few-shot prompts, from the train documents."),
        "context_lines": Attr(types.INT, default=3, doc="Non-blank lines of context a question shows."),
        "choices": Attr(types.INT, default=4, doc="Choices per question: the next line and others."),
        "seed": Attr(types.INT, default=0, doc="Fixes the places and distractors drawn."),
    },
    packages=("pyyaml",),
    code_modules=("rules.evals.mc_task",),
)


# -- eval_harness ---------------------------------------------------------------------------

_TASKS_HINT = 'a label of a local task (mc_task) or {"task": NAME, "data": LABEL} for an lm-eval task'


def _normalize_tasks(value: JsonValue, package: str) -> JsonValue:
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"expected a non-empty list, each {_TASKS_HINT}; got {value!r}")
    tasks: list[JsonValue] = []
    for item in value:
        if isinstance(item, str):
            tasks.append(absolute_label(item, package))
            continue
        if not isinstance(item, dict) or set(item) != {"task", "data"}:
            raise ValueError(f"expected {_TASKS_HINT}, got {item!r}")
        name = item["task"]
        if not isinstance(name, str) or not TASK_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an lm-eval task name (such as 'arc_easy')")
        tasks.append({"task": name, "data": absolute_label(item["data"], package)})
    shown = [json.dumps(task, sort_keys=True) for task in tasks]
    duplicates = sorted({text for text in shown if shown.count(text) > 1})
    if duplicates:
        raise ValueError(f"listed twice: {', '.join(duplicates)}")
    return tasks


def _map_tasks(value: JsonValue, fn: LabelMap) -> JsonValue:
    return [fn(task) if isinstance(task, str) else {**task, "data": fn(task["data"])} for task in value]


# Local tasks by label, lm-eval's own by name with their data's label.
TASKS = AttrType("harness_tasks", _normalize_tasks, _map_tasks)


def _validate_eval_harness(attrs: Mapping[str, JsonValue]) -> None:
    check_kept_step(attrs)
    if attrs["num_fewshot"] < 0:
        raise ValueError(f"num_fewshot must be 0 or more, got {attrs['num_fewshot']}")
    if attrs["limit"] is not None and attrs["limit"] < 1:
        raise ValueError(f"limit must be at least 1 (questions per task), or None for all; got {attrs['limit']}")
    if attrs["batch_size"] < 1:
        raise ValueError(f"batch_size must be positive, got {attrs['batch_size']}")
    if attrs["lm_eval_version"] != LM_EVAL_VERSION:
        raise ValueError(
            f"lm_eval_version is set by marinbuild to the lm-eval it runs ({LM_EVAL_VERSION}); leave it out"
        )


def _eval_harness(ctx: Context) -> None:
    from rules.evals.eval_harness import TaskSource, evaluate

    model, step = ctx.attrs["model"], ctx.attrs["step"]
    tasks = [
        TaskSource(task, ctx.url(task))
        if isinstance(task, str)
        else TaskSource(task["data"], ctx.url(task["data"]), task["task"])
        for task in ctx.attrs["tasks"]
    ]
    where = ctx.url(model if step is None else checkpoint_name(model, step))
    metrics = evaluate(where, model, tasks, ctx.attrs, ctx.tmp)
    (ctx.out / METRICS).write_text(json.dumps(metrics, indent=2) + "\n")
    ctx.log.info("metrics: %s", metrics)


def _eval_harness_headline(out: Path) -> str | None:
    def describe(metrics: Mapping[str, Any]) -> str:
        shown = ", ".join(
            f"{name} {metrics[name]:.3f}" for name in TASK_METRICS if isinstance(metrics.get(name), float)
        )
        tasks = metrics.get("tasks")
        over = f"{tasks} task{'' if tasks == 1 else 's'}, {metrics.get('samples')} questions"
        return f"{shown or 'no acc'} ({'' if tasks == 1 else 'mean over '}{over}; {METRICS})"

    return json_headline(out / METRICS, describe)


def _evaluated(metrics: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """metrics.json by task: `<task>.<metric>` under its task, the means over the tasks (the
    top level's `acc`, `acc_norm`, ...) under their names joined by "+"."""
    overall: dict[str, Any] = {}
    tasks: dict[str, dict[str, Any]] = {}
    for name, value in metrics.items():
        task, dot, metric = name.rpartition(".")
        if dot:
            tasks.setdefault(task, {})[metric] = value
        else:
            overall[name] = value
    return evaluated_by(overall, tasks)


eval_harness = Rule(
    name="eval_harness",
    impl=_eval_harness,
    doc="lm-evaluation-harness tasks on a model (train_lm, a step it keeps, or a Hugging Face checkpoint) "
    "through Levanter's eval_harness, offline -> metrics.json (acc, acc_norm per task and averaged).",
    headline=_eval_harness_headline,
    evaluated=_evaluated,
    validate=_validate_eval_harness,
    attrs={
        "model": Attr(types.LABEL, doc="A train_lm target, or a Hugging Face checkpoint (hf_model, export_hf)."),
        "step": kept_step("evaluated", omit_default=True),
        "tasks": Attr(TASKS, doc=f"Each {_TASKS_HINT}, whose data the target holds."),
        "num_fewshot": Attr(types.INT, default=0, doc="Examples before each question, from the task's own."),
        "limit": Attr(types.INT, default=None, doc="At most this many questions per task (None: all)."),
        "batch_size": Attr(types.INT, default=16, doc="Sequences per batch of the model's forward passes."),
        "lm_eval_version": Attr(types.STRING, default=LM_EVAL_VERSION, doc="Set by marinbuild; part of the key."),
    },
    execution=Execution.SUBPROCESS,
    resources=Resources(cpu=2, memory_gb=4),
    reads_urls=True,
    packages=(*ML_PACKAGES, "lm_eval", "datasets", "transformers"),
    env=("HF_HUB_OFFLINE=1", "HF_DATASETS_OFFLINE=1", NO_TORCH),
    code_modules=(*LEVANTER_MODULES, "rules.evals.eval_harness"),
    metrics_file=METRICS,
    step_inputs={"model": StepInput("step", "a train_lm target that keeps that step")},
)
