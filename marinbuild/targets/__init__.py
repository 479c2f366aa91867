"""Targets: the rules API — attributes, rules, targets, the step context (`ctx`), the units
of a sharded step, what a rule declares its outputs hold — and the built-in rules."""

from marinbuild.targets.attrs import REQUIRED, Attr, AttrType
from marinbuild.targets.outputs import Curves, ReportSection, StepOutputs
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
    "Curves",
    "Execution",
    "ReportSection",
    "Resources",
    "RetryPolicy",
    "Rule",
    "ShardResult",
    "ShardUnit",
    "StepInput",
    "StepOutputs",
    "Target",
    "checkpoint_dir",
    "checkpoint_name",
]
