"""`filegroup`: name a set of source files (or other targets' outputs) as one input.

The files are copied into the output so that the group is a self-contained, verified
entry like any other; its key is made of the files' content digests, so touching a file
reruns nothing and editing one reruns the group and its dependents.
"""

from __future__ import annotations

import shutil

from marinbuild.labels import parse_label
from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr
from marinbuild.targets.context import Context
from marinbuild.targets.rule import Rule


def _copy(ctx: Context) -> None:
    for label in ctx.attrs["srcs"]:
        source = ctx.inputs[label]
        parsed = parse_label(label)
        for path in source.files:
            if source.root == path:  # a source file: keep its workspace-relative path
                destination = ctx.out / parsed.package / parsed.name
            else:  # another target's output: keep its layout under the target's path
                destination = ctx.out / parsed.package / parsed.name / path.relative_to(source.root)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, destination)


filegroup = Rule(
    name="filegroup",
    impl=_copy,
    doc="A named group of files, hashed by content.",
    attrs={"srcs": Attr(types.LABEL_LIST, default=[], doc="Files (labels or glob() results) and targets.")},
)
