"""`eval_harness`'s step: lm-evaluation-harness tasks on local data, the model loaded and
run by Levanter's own `levanter.eval_harness`.

Every task runs from a YAML file written for this run into a directory of its own, which
lm-eval's `TaskManager` indexes (`include_path`): it includes the task's config (the
local task's `task.yaml`, or lm-eval's own YAML of a named task) and points its data at
the files of the task's input, absolute, with the `datasets` cache in the step's
scratch. lm-eval's built-in tasks are indexed (some 20 s) only when a task is named.

What can be wrong with the input — an unknown task name, a target that holds no task,
a data file that is not there — fails the step with one line, before or while lm-eval
loads the tasks, never with a traceback from inside it.
"""

from __future__ import annotations

import rules.common.levanter.environment  # noqa: F401  (first: offline, before Levanter)

import contextlib
import dataclasses
import difflib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import fsspec
import lm_eval
import yaml
from levanter import eval_harness as levanter_eval_harness
from levanter.models.lm_model import LmConfig
from lm_eval import tasks as lm_eval_tasks
from lm_eval.utils import load_yaml_config

from marinbuild.targets.context import StepFailed
from rules.common.hf_format import CONFIG, check_checkpoint
from rules.common.levanter.configs import TrainerSettings, model_config, trainer_config
from rules.common.levanter.data import local_copy
from rules.common.training_files import CHECKPOINT, METRICS, MODEL_FILE, TOKENIZER_DIR
from rules.evals.constants import TASK_FILE, TASK_METRICS

# The data files a named task's input may hold, by the `datasets` builder that reads them.
DATA_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


@dataclasses.dataclass(frozen=True)
class TaskSource:
    """One entry of `tasks`: a local task (`name` None: the target holds task.yaml), or the
    lm-eval task `name` whose data the target holds. `location`: the target's output."""

    label: str
    location: str
    name: str | None = None


@dataclasses.dataclass(frozen=True)
class _Model:
    """What Levanter's eval_harness entry point needs to load a model."""

    checkpoint: str
    tokenizer: Path
    config: LmConfig
    is_hf: bool


@dataclasses.dataclass(frozen=True)
class LocalTasksConfig(levanter_eval_harness.LmEvalHarnessConfig):
    """Levanter's harness config, its tasks (`task_spec`: names) read from `task_dir` alone
    instead of lm-eval's whole index, and a failure to load one reported in one line."""

    task_dir: str = ""

    def to_task_dict(self) -> dict:
        manager = lm_eval_tasks.TaskManager(include_path=self.task_dir, include_defaults=False)
        try:
            return lm_eval_tasks.get_task_dict(list(self.to_task_spec()), manager)
        except Exception as error:  # lm-eval and datasets raise anything; the message says what
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise StepFailed(f"lm-eval could not load the tasks: {type(error).__name__}: {first}") from None


def evaluate(
    where: str, label: str, sources: Sequence[TaskSource], attrs: Mapping[str, Any], tmp: Path
) -> dict[str, Any]:
    """metrics.json of `eval_harness`: the model at `where` (the output of `label`, or a state
    it keeps) on each task."""
    if lm_eval.__version__ != attrs["lm_eval_version"]:
        raise StepFailed(
            f"this step runs lm-eval {lm_eval.__version__}, but its key says {attrs['lm_eval_version']}: "
            "install the lm-eval that pyproject.toml pins"
        )
    task_dir = tmp / "tasks"
    task_dir.mkdir()
    names = _write_tasks(sources, task_dir, attrs["num_fewshot"], tmp)
    model = _load_model(where, label, tmp)
    trainer = {"steps": 1, "batch_size": attrs["batch_size"]}
    config = levanter_eval_harness.EvalHarnessMainConfig(
        eval_harness=LocalTasksConfig(task_spec=names, max_examples=attrs["limit"], task_dir=str(task_dir)),
        tokenizer=str(model.tokenizer),
        checkpoint_path=model.checkpoint,
        checkpoint_is_hf=model.is_hf,
        model=model.config,
        trainer=trainer_config(TrainerSettings(trainer, tmp / METRICS, tmp / "levanter-logs")),
    )
    with contextlib.chdir(tmp):  # where Levanter writes lm_eval_harness_results.json
        outputs = levanter_eval_harness.run_eval_harness_main(config)
    return _metrics(outputs, names)


def _metrics(outputs: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """acc and acc_norm averaged over the tasks, then each task's, and how many questions."""
    per_task: dict[str, Any] = {}
    for name in names:
        results = outputs["results"][name]
        for metric in TASK_METRICS:
            if isinstance(results.get(f"{metric},none"), (int, float)):
                per_task[f"{name}.{metric}"] = results[f"{metric},none"]
        per_task[f"{name}.samples"] = outputs["n-samples"][name]["effective"]
    averages = {
        metric: sum(values) / len(values)
        for metric in TASK_METRICS
        if (values := [per_task[f"{name}.{metric}"] for name in names if f"{name}.{metric}" in per_task])
    }
    samples = sum(outputs["n-samples"][name]["effective"] for name in names)
    return {**averages, "tasks": len(names), "samples": samples, **per_task}


# -- tasks ----------------------------------------------------------------------------------


def _write_tasks(sources: Sequence[TaskSource], task_dir: Path, num_fewshot: int, tmp: Path) -> list[str]:
    """A YAML file in `task_dir` for each task, and the tasks' names (those of the configs)."""
    # lm-eval's index of its own tasks (all of its YAML files), for the tasks named.
    registry = lm_eval_tasks.TaskManager() if any(source.name is not None for source in sources) else None
    names: list[str] = []
    for index, source in enumerate(sources):
        local = local_copy(source.location, tmp / "task-inputs" / str(index))
        if source.name is None:
            config, included = _local_task(source.label, local)
            name = config["task"]
            data_files = _relative_to(config.get("dataset_kwargs", {}).get("data_files"), included.parent, source)
            overrides: dict[str, Any] = {}
        else:
            assert registry is not None
            included = _registered_yaml(registry, source.name)
            config, name = load_yaml_config(str(included), mode="simple"), source.name
            builder, data_files = _data_files(source, local)
            overrides = {"dataset_path": builder, "dataset_name": None, **_absent_splits(config, data_files, source)}
        if name in names:
            raise StepFailed(f"two of the tasks are named {name!r}: lm-eval runs each name once")
        names.append(name)
        dataset_kwargs = {**config.get("dataset_kwargs", {}), "data_files": data_files}
        dataset_kwargs["cache_dir"] = str(tmp / "datasets")  # not the user's ~/.cache
        wrapper = {
            "include": str(included),
            "task": name,
            **overrides,
            "dataset_kwargs": dataset_kwargs,
            "num_fewshot": num_fewshot,
        }
        (task_dir / f"{index}.yaml").write_text(yaml.safe_dump(wrapper, sort_keys=False))
    return names


def _local_task(label: str, local: Path) -> tuple[dict[str, Any], Path]:
    """The config of the local task a target holds, and where its task.yaml is."""
    found = sorted(local.rglob(TASK_FILE))
    if len(found) != 1:
        raise StepFailed(
            f"{label} holds {len(found)} {TASK_FILE} files: a local task is one directory holding an lm-eval "
            f"{TASK_FILE} and its data (an mc_task target)"
        )
    try:
        config = load_yaml_config(str(found[0]), mode="simple")
    except (OSError, yaml.YAMLError) as error:
        raise StepFailed(f"{label}: {TASK_FILE} is not readable YAML ({' '.join(str(error).split())})") from None
    if not isinstance(config, dict) or not isinstance(config.get("task"), str):
        raise StepFailed(f"{label}: {TASK_FILE} names no task (an lm-eval task config has `task: NAME`)")
    if config.get("dataset_path") not in set(DATA_FORMATS.values()):
        raise StepFailed(
            f"{label}: {TASK_FILE} reads dataset_path {config.get('dataset_path')!r}; a local task reads its "
            f"own files: dataset_path json or parquet, with dataset_kwargs.data_files"
        )
    return config, found[0]


def _relative_to(data_files: Any, root: Path, source: TaskSource) -> Any:
    """A local task's data_files (a path, a list, or lists by split), each made absolute
    from the directory of its task.yaml, once known to be there."""
    if isinstance(data_files, dict):
        return {split: _relative_to(files, root, source) for split, files in data_files.items()}
    if isinstance(data_files, list):
        return [_relative_to(files, root, source) for files in data_files]
    if not isinstance(data_files, str):
        raise StepFailed(f"{source.label}: {TASK_FILE} names no data files (dataset_kwargs.data_files)")
    path = root / data_files
    if not path.is_file():
        raise StepFailed(f"{source.label}: {TASK_FILE} reads {data_files}, which the target does not hold")
    return str(path)


def _registered_yaml(registry: lm_eval_tasks.TaskManager, name: str) -> Path:
    """The YAML of lm-eval's task `name`, once known to be a task of its own (no group, no tag)."""
    entry = registry.task_index.get(name)
    if entry is None:
        close = difflib.get_close_matches(name, registry.all_subtasks, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise StepFailed(f"lm-eval {lm_eval.__version__} has no task named {name!r}{hint}")
    if entry["type"] != "task" or not isinstance(entry["yaml_path"], str):
        raise StepFailed(
            f"{name!r} is a {entry['type'].replace('_', ' ')} of lm-eval, not a task read from a YAML config: "
            "name each task of it, with its data"
        )
    return Path(entry["yaml_path"])


def _data_files(source: TaskSource, local: Path) -> tuple[str, dict[str, list[str]]]:
    """The `datasets` builder and the files by split of a named task's data: files named
    `<split>.jsonl` (or .json, .parquet), or `<split>-00000-of-00001.parquet` as on the Hub."""
    files = sorted(path for path in local.rglob("*") if path.is_file() and path.suffix in DATA_FORMATS)
    builders = {DATA_FORMATS[path.suffix] for path in files}
    if len(builders) != 1:
        shown = "no JSON lines or Parquet files" if not files else "both JSON and Parquet files"
        raise StepFailed(f"{source.label} holds {shown}: the data of {source.name!r} is one format, a file per split")
    by_split: dict[str, list[str]] = {}
    for path in files:
        by_split.setdefault(path.name.split("-")[0].split(".")[0], []).append(str(path))
    return builders.pop(), by_split


_SPLIT_FIELDS = ("training_split", "validation_split", "test_split", "fewshot_split")


def _absent_splits(config: Mapping[str, Any], data_files: Mapping[str, Any], source: TaskSource) -> dict[str, None]:
    """The split fields of a named task's config whose split its data lacks, unset: lm-eval
    then evaluates on the validation split if there is no test split, and draws few-shot
    examples from the train, validation or (with a warning) test split, the first there is.
    Data with neither a test nor a validation split has nothing to evaluate."""
    absent = {field: None for field in _SPLIT_FIELDS if config.get(field) and config[field] not in data_files}
    evaluated = [
        config[field] for field in ("test_split", "validation_split") if config.get(field) and field not in absent
    ]
    if not evaluated:
        wanted = " or ".join(config[field] for field in ("test_split", "validation_split") if config.get(field))
        raise StepFailed(
            f"{source.label} holds the splits {sorted(data_files)} of {source.name!r}, which evaluates its "
            f"{wanted or 'test'} split: give its file ({wanted.split(' or ')[0] or 'test'}.jsonl)"
        )
    return absent


# -- the model ------------------------------------------------------------------------------


def _load_model(where: str, label: str, tmp: Path) -> _Model:
    """A train_lm output or kept state (model.json, checkpoint/, tokenizer/), read where it
    is, or a Hugging Face checkpoint (config.json, safetensors, tokenizer.json) of a family
    Levanter knows, as local files (transformers reads only those)."""
    fs, root = fsspec.core.url_to_fs(where)
    if fs.exists(f"{root}/{MODEL_FILE}"):
        trained = json.loads(fs.cat_file(f"{root}/{MODEL_FILE}"))
        tokenizer = local_copy(f"{where}/{TOKENIZER_DIR}", tmp / "tokenizer")
        return _Model(f"{where}/{CHECKPOINT}", tokenizer, model_config(trained["model"], tokenizer, tmp), False)
    if not fs.exists(f"{root}/{CONFIG}"):
        raise StepFailed(
            f"{label} is neither a trained model ({MODEL_FILE}, checkpoint/) nor a Hugging Face checkpoint ({CONFIG})"
        )
    local = local_copy(where, tmp / "model")
    family = json.loads((local / CONFIG).read_text()).get("model_type")
    known = LmConfig.get_known_choices()
    if family not in known:
        raise StepFailed(f"{label}: Levanter has no model of type {family!r} (it has {', '.join(sorted(known))})")
    check_checkpoint(local, family, label)
    config = known[family](reference_checkpoint=str(local), tokenizer=str(local))
    return _Model(str(local), local, config, True)
