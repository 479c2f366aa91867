"""`py_step`: call a Python function with its config and inputs — the Marin-style step.

`fn = "//pkg:steps.py:prepare"` names a function in a source file of the workspace. The
file is an input like any other, so editing it reruns the step. The function runs in
its own process and receives the step context: `ctx.attrs["config"]`, `ctx.inputs`
(label -> files), `ctx.out` (where to write), `ctx.log` and `ctx.progress`.
"""

from __future__ import annotations

import importlib.util
import sys

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr
from marinbuild.targets.context import Context, StepFailed
from marinbuild.targets.rule import Execution, Rule


def _call(ctx: Context) -> None:
    file_label, _, function_name = ctx.attrs["fn"].rpartition(":")
    path = ctx.location(file_label)
    spec = importlib.util.spec_from_file_location(f"marinbuild_step_{ctx.key[:16]}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(module)
    function = getattr(module, function_name, None)
    if not callable(function):
        raise StepFailed(f"{path} defines no function '{function_name}'")
    function(ctx)


py_step = Rule(
    name="py_step",
    impl=_call,
    execution=Execution.SUBPROCESS,
    doc="Call fn(ctx), a Python function in a workspace file, with a JSON config and inputs.",
    attrs={
        "fn": Attr(types.FUNCTION, doc="'//pkg:file.py:function'"),
        "config": Attr(types.JSON, default={}, doc="Passed as ctx.attrs['config']."),
        "deps": Attr(types.LABEL_LIST, default=[], doc="Inputs, available as ctx.inputs[label]."),
    },
)
