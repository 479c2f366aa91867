"""Which rules a workspace's BUILD files can call: the built-ins plus its rule modules.

Rule modules are named in the workspace settings (`rules = ["rules.lm"]`) and imported
from the workspace root; every `Rule` they define at module level becomes a global of
BUILD.marin and .star files under its own name.
"""

from __future__ import annotations

import importlib
import sys

from marinbuild.errors import WorkspaceError
from marinbuild.packages.workspace import Workspace
from marinbuild.targets.builtin import BUILTIN_RULES
from marinbuild.targets.rule import Rule


def workspace_rules(workspace: Workspace) -> dict[str, Rule]:
    rules = {rule.name: rule for rule in BUILTIN_RULES}
    if workspace.rule_modules and str(workspace.root) not in sys.path:
        sys.path.insert(0, str(workspace.root))
    for module_name in workspace.rule_modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise WorkspaceError(
                f"{workspace.config_file}: cannot import rule module '{module_name}': {error}",
                hint="rule modules are imported from the workspace root and must not import ML libraries at top level",
            ) from None
        for value in vars(module).values():
            if isinstance(value, Rule):
                if value.name in rules and rules[value.name] is not value:
                    raise WorkspaceError(
                        f"rule '{value.name}' from '{module_name}' clashes with another rule of that name"
                    )
                rules[value.name] = value
    return rules
