"""What the benchmark rules and their steps read alike: the lm-eval they run, a local
task's files, and the metrics metrics.json holds."""

import re

# The lm-eval the steps run, as pinned in pyproject.toml: the default (and only accepted
# value) of `lm_eval_version`, so that the key changes with it. Written here rather than
# read from the installed package, which would cost every load importlib.metadata.
LM_EVAL_VERSION = "0.4.11"
TASK_FILE = "task.yaml"
METRICS = "metrics.json"
# lm-eval's metrics of a multiple-choice task that metrics.json holds.
TASK_METRICS = ("acc", "acc_norm")
# What a task name may be made of (lm-eval's names: `arc_easy`, `hellaswag`, `mmlu_anatomy`).
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
# An mc_task's data files, by split.
SPLIT_FILES = {"test": "test.jsonl", "train": "train.jsonl"}
