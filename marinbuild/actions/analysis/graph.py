"""Planning: from command-line patterns to a checked, ordered graph of targets.

Patterns expand to rule targets (wildcards skip `manual` ones), dependencies are
followed across packages, every label must name a rule target or an existing source
file, and cycles are reported with the whole cycle and where each step is declared.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from marinbuild.errors import GraphError, LabelError, Location, did_you_mean
from marinbuild.labels import Label, PatternKind, TargetPattern, parse_label
from marinbuild.packages import BUILD_FILE, PackageLoader
from marinbuild.packages.loader import enclosing_subpackage
from marinbuild.targets.rule import Target, checkpoint_name

MANUAL = "manual"


@dataclass(frozen=True)
class SourceFile:
    """A file of the workspace used as an input, named by a label like any target."""

    label: Label
    path: Path


@dataclass(frozen=True)
class Checkpoint:
    """The state target `of` kept at `step`, read by another target at that step
    (`eval_lm(model = ":run", step = 2000)`): a node of its own, which the scheduler
    resolves as soon as that state is published, before `of` ends."""

    of: str
    step: int


@dataclass
class Graph:
    """Rule targets, source files and kept states reachable from the requested targets."""

    requested: list[str]
    targets: dict[str, Target] = field(default_factory=dict)
    sources: dict[str, SourceFile] = field(default_factory=dict)
    # rule target -> what it reads (labels, and names of kept states); a kept state -> [its target]
    deps: dict[str, list[str]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # rule targets, dependencies first
    checkpoints: dict[str, Checkpoint] = field(default_factory=dict)  # by checkpoint_name()

    def rule_deps(self, label: str) -> list[str]:
        """The rule targets `label` needs, a kept state standing for the target keeping it."""
        targets, checkpoints = self.targets, self.checkpoints
        found = [dep if dep in targets else checkpoints[dep].of for dep in self.inputs(label)]
        return list(dict.fromkeys(found))

    def inputs(self, label: str) -> list[str]:
        """What a rule target waits for: the rule targets and kept states it reads."""
        targets, checkpoints = self.targets, self.checkpoints
        return [dep for dep in self.deps[label] if dep in targets or dep in checkpoints]

    def dependents(self) -> dict[str, list[str]]:
        reverse: dict[str, list[str]] = {label: [] for label in self.targets}
        for label in self.order:
            for dep in self.rule_deps(label):
                reverse[dep].append(label)
        return reverse


def expand_patterns(loader: PackageLoader, patterns: Sequence[TargetPattern], skip: tuple[Path, ...] = ()) -> list[str]:
    """The rule targets the patterns name, in order, after subtractions."""
    selected: dict[str, None] = {}
    for pattern in patterns:
        labels = _expand(loader, pattern, skip)
        if pattern.negative:
            for label in labels:
                selected.pop(label, None)
        else:
            for label in labels:
                selected.setdefault(label)
    return list(selected)


def _expand(loader: PackageLoader, pattern: TargetPattern, skip: tuple[Path, ...]) -> list[str]:
    packages = pattern_packages(loader, pattern, skip)  # raises if the package does not exist
    if pattern.kind is PatternKind.TARGET:
        package = loader.package(pattern.package)
        if pattern.name not in package.targets:
            raise GraphError(
                f"no target '{pattern.name}' in package //{pattern.package}",
                hint=did_you_mean(pattern.name, package.targets),
            )
        return [str(pattern.label)]
    return [
        str(target.label)
        for package in packages
        for target in loader.package(package).targets.values()
        if MANUAL not in target.tags
    ]


def pattern_packages(loader: PackageLoader, pattern: TargetPattern, skip: tuple[Path, ...] = ()) -> list[str]:
    """The packages a pattern names: its own, or every one below a recursive pattern's root.

    A package or directory that does not exist is an error, not an empty match: it is
    almost always a typo.
    """
    if pattern.kind is PatternKind.RECURSIVE:
        if not loader.workspace.package_dir(pattern.package).is_dir():
            raise GraphError(f"'{pattern.text}': directory '{pattern.package}' does not exist")
        return loader.workspace.find_packages(pattern.package, skip)
    if not loader.has_package(pattern.package):
        raise GraphError(
            f"'{pattern.text}': no package '//{pattern.package}'",
            hint=f"a package is a directory with a {BUILD_FILE} file",
        )
    return [pattern.package]


def build_graph(loader: PackageLoader, requested: list[str]) -> Graph:
    graph = Graph(requested=requested)
    for label in requested:
        _add(loader, graph, label, None)
    graph.order = _topological_order(graph)
    return graph


def _add(loader: PackageLoader, graph: Graph, label: str, referrer: Target | None) -> None:
    """Add `label` and, for a rule target, everything it reads (iteratively: deep graphs are fine)."""
    stack = [(label, referrer)]
    while stack:
        current, by = stack.pop()
        if current in graph.targets or current in graph.sources:
            continue
        node = resolve(loader, current, by)
        if isinstance(node, SourceFile):
            graph.sources[current] = node
            continue
        graph.targets[current] = node
        graph.deps[current] = list(node.inputs)
        read_at = {
            checkpoint_name(label, step): (attr, label, step) for attr, (label, step) in node.steps_read().items()
        }
        for dep in reversed(graph.deps[current]):
            if dep in read_at:
                attr, dep, step = read_at[dep]
                _check_checkpoint(loader, node, attr, dep, step)
                graph.checkpoints[checkpoint_name(dep, step)] = Checkpoint(dep, step)
                graph.deps[checkpoint_name(dep, step)] = [dep]
            stack.append((dep, node))


def _check_checkpoint(loader: PackageLoader, reader: Target, attr: str, label: str, step: int) -> None:
    """`reader` reads the state `label` keeps at `step`: `label` must name a target that
    keeps states, keep that step, and fit `reader` (the rule's `StepInput.check`)."""
    spec = reader.rule.step_inputs[attr]
    base = resolve(loader, label, reader)
    if isinstance(base, SourceFile) or base.rule.keeps_checkpoints is None:
        what = "a source file" if isinstance(base, SourceFile) else f"a {base.rule.name} target"
        raise GraphError(
            f"{reader.label}: '{attr}' with '{spec.step}' reads a kept checkpoint, but {label} is {what}, "
            "which keeps none",
            location=reader.location,
            hint=f"'{attr}' names {spec.names}",
        )
    kept = base.attrs[base.rule.keeps_checkpoints] or []
    if step not in kept:
        listed = ", ".join(str(item) for item in kept) or "none"
        raise GraphError(
            f"{reader.label}: {label} keeps no checkpoint at step {step} (it keeps: {listed})",
            location=reader.location,
            hint=f"add {step} to {base.rule.keeps_checkpoints} of {label} ({base.location}), or read a step it keeps",
        )
    if spec.check is not None:
        try:
            spec.check(reader.attrs, base.attrs)
        except ValueError as error:
            raise GraphError(
                f"{reader.label}: {error}", location=reader.location, hint=getattr(error, "hint", None)
            ) from None


def resolve(loader: PackageLoader, text: str, referrer: Target | None = None) -> Target | SourceFile:
    """The rule target or source file a label names; `referrer` is who mentions it, for errors."""
    if text.startswith("//"):  # the usual case, a target of a loaded package: no parsing needed
        package_name, _, name = text[2:].partition(":")
        loaded = loader.loaded(package_name)
        if loaded is not None and name in loaded.targets:
            return loaded.targets[name]
    where = referrer.location if referrer else None
    user = f"{referrer.label} depends on '{text}'" if referrer else f"'{text}'"
    try:
        label = parse_label(text)
    except LabelError as error:
        raise GraphError(error.message, location=where) from None
    if not loader.has_package(label.package):
        raise GraphError(f"{user}, but there is no package '//{label.package}'", location=where)
    package = loader.package(label.package)
    if label.name in package.targets:
        return package.targets[label.name]
    path = loader.workspace.package_dir(label.package) / label.name
    if path.is_file():
        _check_inside_package(loader, label, path, where)
        _check_inside_workspace(loader, label, path, where)
        return SourceFile(label, path)
    _check_not_broken_link(loader, user, path, where)
    raise GraphError(
        f"{user}, which is neither a target of //{label.package} nor a file in it",
        location=where,
        hint=did_you_mean(label.name, package.targets),
    )


def _check_inside_package(loader: PackageLoader, label: Label, path: Path, where: Location | None) -> None:
    directory = enclosing_subpackage(loader.workspace.package_dir(label.package), path)
    if directory is not None:
        sub = directory.relative_to(loader.workspace.root).as_posix()
        raise GraphError(
            f"label '{label}' crosses into package '//{sub}'",
            location=where,
            hint=f"refer to it as '//{sub}:{path.relative_to(directory).as_posix()}'",
        )


def _check_not_broken_link(loader: PackageLoader, user: str, path: Path, where: Location | None) -> None:
    """A symlink that leads to no file (dangling, or a loop) is named with where it points:
    the file is there to see in the package, and "no such file" would not say why."""
    failure = _stat_errno(path) if path.is_symlink() else None
    if failure is None:
        return  # not a link, or one to a directory (not a file either: the caller says so)
    why = "a loop of symlinks" if failure == errno.ELOOP else "nothing (no such file)"
    link = path.relative_to(loader.workspace.root).as_posix()
    raise GraphError(
        f"{user}, but {link} is a symlink to '{os.readlink(path)}', which leads to {why}",
        location=where,
        hint="point the symlink at a file inside the workspace, or remove it",
    )


def _stat_errno(path: Path) -> int | None:
    """Why `path` cannot be followed to what it names (an errno), or None if it can."""
    try:
        path.stat()
    except OSError as error:
        return error.errno
    return None


def _check_inside_workspace(loader: PackageLoader, label: Label, path: Path, where: Location | None) -> None:
    """A source's bytes are hashed and kept in the store (for `rerun`): a symlink out of the
    workspace (`secrets -> /etc`) would publish a file of this machine to everyone who
    reads the store. Symlinks that stay inside the workspace are followed."""
    real = loader.workspace.outside(path)
    if real is not None:
        raise GraphError(
            f"source file '{label}' is a symlink to {real}, outside the workspace",
            location=where,
            hint="sources must lie inside the workspace: copy the file in, or make it the output of a rule",
        )


def _topological_order(graph: Graph) -> list[str]:
    """Dependencies first; a cycle is an error that lists it, with file:line per target."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    rule_deps: dict[str, list[str]] = {}  # each label's, computed once (a label is visited once per dep)
    for root in graph.targets:
        if state.get(root) == 2:
            continue
        path: list[str] = []
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            label, index = stack.pop()
            if index == 0:
                state[label] = 1
                path.append(label)
            deps = rule_deps.get(label)
            if deps is None:
                deps = rule_deps[label] = graph.rule_deps(label)
            if index < len(deps):
                stack.append((label, index + 1))
                dep = deps[index]
                if state.get(dep) == 1:
                    _raise_cycle(graph, path[path.index(dep) :] + [dep])
                if dep not in state:
                    stack.append((dep, 0))
                continue
            state[label] = 2
            path.pop()
            order.append(label)
    return order


def _raise_cycle(graph: Graph, cycle: list[str]) -> None:
    steps = "\n".join(f"    {label}  ({graph.targets[label].location})" for label in cycle)
    raise GraphError(
        f"dependency cycle:\n{steps}",
        location=graph.targets[cycle[0]].location,
        hint="a target cannot depend on itself, directly or through others",
    )
