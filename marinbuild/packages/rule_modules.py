"""Which rules a workspace's BUILD files can call: the built-ins plus its rule modules.

Rule modules are named in the workspace settings (`rules = ["rules.lm.decls"]`) and imported
from the workspace root; every `Rule` they define at module level becomes a global of
BUILD.marin and .star files under its own name. A package of rules may list the modules it
moved (`MOVED_MODULES`), so that a workspace naming an old one fails with the new name.

Loading runs some of their code (a rule's `validate`, computed defaults, its attribute
types), so the package cache trusts a package only while that code is unchanged:
`loading_code` says which files it is.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

from marinbuild.errors import WorkspaceError
from marinbuild.packages.workspace import Workspace
from marinbuild.targets.builtin import BUILTIN_RULES
from marinbuild.targets.rule import Rule, import_rule_package


def workspace_rules(workspace: Workspace) -> dict[str, Rule]:
    rules = {rule.name: rule for rule in BUILTIN_RULES}
    if workspace.rule_modules and str(workspace.root) not in sys.path:
        sys.path.insert(0, str(workspace.root))
    for module_name in workspace.rule_modules:
        try:
            import_rule_package(module_name, workspace.root)
            module = importlib.import_module(module_name)
        except ImportError as error:
            _check_not_moved(workspace, module_name)
            raise WorkspaceError(
                f"{workspace.config_file}: cannot import rule module '{module_name}': {error}",
                hint="rule modules are imported from the workspace root and must not import ML libraries at top level",
            ) from None
        _check_not_moved(workspace, module_name)
        for value in vars(module).values():
            if isinstance(value, Rule):
                if value.name in rules and rules[value.name] is not value:
                    raise WorkspaceError(
                        f"rule '{value.name}' from '{module_name}' clashes with another rule of that name"
                    )
                rules[value.name] = value
    return rules


def _check_not_moved(workspace: Workspace, module_name: str) -> None:
    """Refuse a rule module its package says has moved: a package of rules may map the
    names its modules once had to where their rules are now (`MOVED_MODULES` in its
    top-level `__init__.py`), whether or not something else lives at the old name now."""
    top = module_name.partition(".")[0]
    if top == module_name:
        return
    try:
        moved = getattr(importlib.import_module(top), "MOVED_MODULES", None)
    except ImportError:
        return
    new = moved.get(module_name) if isinstance(moved, dict) else None
    if isinstance(new, str) and new != module_name:
        raise WorkspaceError(
            f"{workspace.config_file}: rule module '{module_name}' moved to '{new}'",
            hint=f"name '{new}' in the rules setting of {workspace.config_file.name}",
        )


# marinbuild's own code that loading runs: labels, attribute types, rules and the built-in
# rules, and the loader. Its version alone would not change in a checkout being edited.
_MARINBUILD_LOADING = ("marinbuild.labels", "marinbuild.targets", "marinbuild.packages")


def loading_code(workspace: Workspace) -> list[Path]:
    """The Python files whose code evaluating BUILD files can run, sorted: marinbuild's
    loading layers, and for each rule module every file of its top-level package (the
    helpers its checks and computed defaults call), or the module itself outside one.

    Found from the files on disk, not from what this process has imported, so every command
    (and a notebook) names the same files: a package cache keyed on them is shared, never
    thrown away by the next command. Called after `workspace_rules`: rule modules are found
    where their import found them."""
    tops = dict.fromkeys([*_MARINBUILD_LOADING, *(name.partition(".")[0] for name in workspace.rule_modules)])
    files: set[Path] = set()
    for name in tops:
        spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        if spec.submodule_search_locations is None:
            if spec.origin is not None and os.path.isfile(spec.origin):
                files.add(Path(spec.origin))
            continue
        for location in spec.submodule_search_locations:
            files.update(_python_files(location))
    return sorted(files)


def _python_files(directory: str) -> list[Path]:
    """The .py files in and below a package directory (not in hidden or __pycache__ ones)."""
    found = []
    pending = [directory]
    while pending:
        with os.scandir(pending.pop()) as listing:
            for entry in listing:
                if entry.name.startswith((".", "__pycache__")):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.name.endswith(".py"):
                    found.append(Path(entry.path))
    return found
