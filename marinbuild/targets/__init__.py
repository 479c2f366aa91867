"""Targets: the rules API (attributes, rules, targets, the step context) and the built-in rules."""

from marinbuild.targets.attrs import REQUIRED, Attr, AttrType
from marinbuild.targets.rule import (
    Execution,
    Resources,
    RetryPolicy,
    Rule,
    StepInput,
    Target,
    checkpoint_dir,
    checkpoint_name,
)
from marinbuild.targets.shards import ShardResult, ShardUnit

__all__ = [
    "REQUIRED",
    "Attr",
    "AttrType",
    "Execution",
    "Resources",
    "RetryPolicy",
    "Rule",
    "ShardResult",
    "ShardUnit",
    "StepInput",
    "Target",
    "checkpoint_dir",
    "checkpoint_name",
]
