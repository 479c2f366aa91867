"""The target graph as a query sees it: rule targets and source files, loaded on demand.

A query about one experiment should load only the packages it reaches, so nothing is
loaded up front: a target pattern loads the packages it names, and a traversal loads a
package when it first reaches one of its labels. Nodes and edges are memoized, so a
label is resolved once however many paths lead to it.

Unlike a build, a query lists targets tagged `manual` in wildcards (it asks what exists,
not what to run), and `:*` / `:all-targets` also list the package's source files — those
its targets mention, and its BUILD file — as Bazel's query does.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from marinbuild.actions.analysis.graph import SourceFile, pattern_packages, resolve
from marinbuild.errors import GraphError, LabelError, LoadError, MarinbuildError
from marinbuild.labels import Label, PatternKind, parse_label, parse_pattern
from marinbuild.packages import BUILD_FILE, Package, PackageLoader
from marinbuild.targets.rule import Target

Node = Target | SourceFile


def kind_of(node: Node) -> str:
    """The kind `kind()` matches and `label_kind` prints, as in Bazel: `genrule rule`, `source file`."""
    return f"{node.rule.name} rule" if isinstance(node, Target) else "source file"


class Universe:
    def __init__(self, loader: PackageLoader, cwd_package: str, skip: tuple[Path, ...], keep_going: bool):
        self.loader = loader
        self.cwd_package = cwd_package
        self.skip = skip
        self.keep_going = keep_going
        self.warnings: list[str] = []
        self._nodes: dict[str, Node] = {}
        self._deps: dict[str, tuple[str, ...]] = {}
        self._direct: dict[str, list[str]] = {}

    def tolerate(self, error: MarinbuildError) -> None:
        """Under --keep-going, note the error and carry on without what it concerns; else raise it."""
        if not self.keep_going:
            raise error
        self.warnings.append(str(error))

    def node(self, label: str) -> Node:
        """The rule target or source file `label` (a canonical `//pkg:name`) names."""
        node = self._nodes.get(label)
        if node is None:
            node = self._nodes[label] = resolve(self.loader, label)
        return node

    def matching(self, text: str) -> list[str]:
        """The targets a target pattern names (as a query reads it: see the module docstring)."""
        pattern = parse_pattern(text, self.cwd_package)
        if pattern.negative:
            raise LabelError(f"'{text}' is a subtraction", hint="in a query, subtract with 'x - y' or 'x except y'")
        packages = pattern_packages(self.loader, pattern, self.skip)
        if pattern.kind is PatternKind.TARGET:
            label = str(pattern.label)
            self.node(label)
            return [label]
        labels: list[str] = []
        for package in packages:
            try:
                labels += self.package_targets(package, files=pattern.files)
            except (LoadError, GraphError) as error:
                self.tolerate(error)
        return labels

    def package_targets(self, package: str, *, files: bool) -> list[str]:
        """The rule targets of a package in declaration order, then (if `files`) its source files."""
        loaded = self.loader.package(package)
        labels = []
        for target in loaded.targets.values():
            label = str(target.label)
            self._nodes.setdefault(label, target)
            labels.append(label)
        return labels + self._source_files(loaded) if files else labels

    def _source_files(self, package: Package) -> list[str]:
        prefix = f"//{package.name}:"
        mentioned: dict[str, None] = {}
        for target in package.targets.values():
            for label in self.direct_labels(str(target.label)):
                if label.startswith(prefix) and label[len(prefix) :] not in package.targets:
                    mentioned.setdefault(label)
        files = []
        for label in mentioned:
            try:
                self.node(label)
                files.append(label)
            except GraphError as error:
                self.tolerate(error)
        return files + [self._file(package.name, BUILD_FILE, package.build_file)]

    def _file(self, package: str, name: str, path: Path) -> str:
        label = str(Label(package, name))
        self._nodes.setdefault(label, SourceFile(Label(package, name), path))
        return label

    def deps(self, label: str) -> tuple[str, ...]:
        """The direct dependencies of `label`, resolved (loading their packages), in attribute order."""
        found = self._deps.get(label)
        if found is not None:
            return found
        node = self.node(label)
        resolved = []
        for dep in self.direct_labels(label):
            if dep not in self._nodes:
                try:
                    self._nodes[dep] = resolve(self.loader, dep, node)
                except (GraphError, LoadError) as error:
                    self.tolerate(error)
                    continue
            resolved.append(dep)
        found = self._deps[label] = tuple(resolved)
        return found

    def direct_labels(self, label: str) -> list[str]:
        """Every label `label`'s attributes mention, unresolved: cheap, for ordering and output."""
        found = self._direct.get(label)
        if found is None:
            node = self._nodes[label]
            found = self._direct[label] = list(node.deps) if isinstance(node, Target) else []
        return found

    def build_files(self, label: str) -> list[str]:
        """The BUILD file of `label`'s package, the .star files it loads, and their packages' BUILD files."""
        package = self.loader.package(parse_label(label).package)
        found: dict[str, None] = {}
        for path in package.reads:
            file_label = self._file_label(path)
            found.setdefault(file_label)
            owner = parse_label(file_label).package
            if self.loader.has_package(owner):
                found.setdefault(self._file(owner, BUILD_FILE, self.loader.workspace.package_dir(owner) / BUILD_FILE))
        return list(found)

    def _file_label(self, path: str) -> str:
        """A workspace file's label: its name within the nearest package above it."""
        directory = posixpath.dirname(path)
        while directory and not self.loader.has_package(directory):
            directory = posixpath.dirname(directory)
        if not self.loader.has_package(directory):
            directory = posixpath.dirname(path)
        name = path[len(directory) + 1 :] if directory else path
        return self._file(directory, name, self.loader.workspace.root / path)
