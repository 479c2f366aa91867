"""The rules every workspace has, available as globals in BUILD.marin files."""

from marinbuild.targets.builtin.external import external
from marinbuild.targets.builtin.filegroup import filegroup
from marinbuild.targets.builtin.genrule import genrule
from marinbuild.targets.builtin.py_step import py_step

BUILTIN_RULES = (genrule, filegroup, py_step, external)
