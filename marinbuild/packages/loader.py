"""Loading: evaluate BUILD.marin files (Starlark) into targets.

Loading is pure: it reads BUILD and .star files and lists directories for glob(), and
nothing else — no store, no network, no ML imports — so query over hundreds of packages
stays fast and a malformed file can never half-write anything.

How rules reach Starlark: starlark-pyo3 can only expose Python callables per module, and
a callable cannot see the Starlark call stack. So every file is evaluated with an
implicit first line that loads a generated prelude, whose rule functions are Starlark
wrappers passing `call_stack()` to one Python callable, `_declare`. That gives each
target the BUILD line it was declared at (through macros too). Line numbers reported by
Starlark are shifted back by that one injected line.
"""

from __future__ import annotations

import difflib
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import starlark as sl

from marinbuild.errors import LabelError, LoadError, Location, MarinbuildError
from marinbuild.labels import Label, parse_label
from marinbuild.labels.label import check_name
from marinbuild.packages.package_cache import GlobCall, PackageCache, PackageRecord
from marinbuild.packages.workspace import BUILD_FILE, Workspace
from marinbuild.targets.attrs import JsonValue
from marinbuild.targets.rule import Resources, Rule, Target

_PRELUDE = "@marinbuild//:prelude.star"
_FRAME = re.compile(r"^\s*\* (.+?):(\d+), in ", re.MULTILINE)
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_NON_FINITE = re.compile(r"\b(nan|inf)\b")
_POINTER = re.compile(r"^\s*--> (.+?):(\d+):(\d+)", re.MULTILINE)
_GLOBALS = sl.Globals.extended_by(
    [
        sl.LibraryExtension.CallStack,
        sl.LibraryExtension.StructType,
        sl.LibraryExtension.Json,
        sl.LibraryExtension.Print,
        sl.LibraryExtension.Map,
        sl.LibraryExtension.Filter,
    ]
)


@dataclass
class Package:
    """A directory with a BUILD.marin file and the targets it declares, in order."""

    name: str
    build_file: Path
    targets: dict[str, Target] = field(default_factory=dict)
    # Workspace-relative paths of the files evaluating it read: the BUILD file and every
    # .star file it loaded, transitively (what `buildfiles()` in a query reports).
    reads: tuple[str, ...] = ()


def _first_frame(stack: str) -> Location:
    """The outermost frame of a Starlark call stack: the BUILD line that declared a target."""
    match = _FRAME.search(stack)
    assert match is not None, stack
    return Location(match.group(1), int(match.group(2)) - 1)


def _non_finite_attribute(kwargs_repr: str) -> str | None:
    """The attribute whose value contains a NaN or an infinity, in Starlark's repr of the kwargs."""
    depth, key, last_string, index = 0, None, "", 0
    while index < len(kwargs_repr):
        char = kwargs_repr[index]
        if char == '"':
            match = _STRINGS.match(kwargs_repr, index)
            assert match is not None
            last_string, index = match.group(0)[1:-1], match.end()
            continue
        if char in "{[(":
            depth += 1
        elif char in "}])":
            depth -= 1
        elif char == ":" and depth == 1:
            key = last_string
        elif _NON_FINITE.match(kwargs_repr, index):
            return key
        index += 1
    return None


def _starlark_error(error: sl.StarlarkError, source: str) -> LoadError:
    """Turn starlark-pyo3's rendered error into `file:line: message`.

    Lines are shifted back by the injected prelude line. Starlark places an error at the
    end of input (an unclosed bracket) on that injected line; report it at the file's end.
    """
    text = str(error)
    message_lines = [line[len("error: ") :] for line in text.splitlines() if line.startswith("error: ")]
    message = message_lines[-1] if message_lines else text.strip().splitlines()[-1]
    pointer = _POINTER.search(text)
    location = None
    if pointer and pointer.group(1) != _PRELUDE:
        line, column = int(pointer.group(2)) - 1, int(pointer.group(3))
        if line < 1:
            line, column, message = max(1, source.count("\n")), None, f"{message} (at end of file)"
        location = Location(pointer.group(1), line, column)
    frames = [(file, int(line) - 1) for file, line in _FRAME.findall(text) if file != _PRELUDE]
    if location is None and frames:
        location = Location(*frames[0])
    elif location is not None and frames and frames[0][0] != location.file:
        # Raised inside a macro of a .star file: say which call of the BUILD file ran it.
        message = f"{message} (in a macro called at {frames[0][0]}:{frames[0][1]})"
    return LoadError(message, location=location)


class PackageLoader:
    """Loads packages on demand and caches them (and the .star modules they load)."""

    def __init__(self, workspace: Workspace, rules: Mapping[str, Rule], cache: PackageCache | None = None):
        self.workspace = workspace
        self.rules = dict(rules)
        self.cache = cache
        self._packages: dict[str, Package] = {}
        self._has_package: dict[str, bool] = {}
        # Per file being evaluated: the files it read (itself, and .star files loaded transitively).
        self._reads: list[set[str]] = []
        self._module_reads: dict[str, set[str]] = {}
        self._globs: list[GlobCall] = []
        self._modules: dict[str, sl.FrozenModule] = {}
        self._loading: list[str] = []  # files being evaluated, innermost last
        self._sources: dict[str, str] = {}  # their text, to place errors in load() statements
        self._current: Package | None = None
        self._pending: MarinbuildError | None = None
        self._header = f"load({_PRELUDE!r}, {', '.join(repr(name) for name in self.rules)})\n"
        self._prelude = self._evaluate_prelude()
        # Each package's evaluation (with the .star files it loads) ends by this time.
        self._deadline = math.inf
        self._eval_options = sl.EvalOptions(check_cancelled=self._past_deadline)
        self._file_loader = sl.FileLoader(self._load_module)

    # -- public -------------------------------------------------------------------------

    def has_package(self, package: str) -> bool:
        if package not in self._has_package:
            self._has_package[package] = (self.workspace.package_dir(package) / BUILD_FILE).is_file()
        return self._has_package[package]

    def loaded(self, name: str) -> Package | None:
        """The package if this loader has it already, without checking `name` at all."""
        return self._packages.get(name)

    def package(self, name: str) -> Package:
        if name not in self._packages:
            self._packages[name] = self._cached_package(name) or self._load_package(name)
        return self._packages[name]

    def save_cache(self) -> None:
        if self.cache is not None:
            self.cache.save()

    # -- the package cache ----------------------------------------------------------------

    def _cached_package(self, name: str) -> Package | None:
        if self.cache is None:
            return None
        root = self.workspace.package_dir(name)
        record = self.cache.get(name, lambda include, exclude: glob_files(root, include, exclude))
        if record is None:
            return None
        package = Package(name, root / BUILD_FILE, reads=tuple(record.files))
        for target_name, rule_name, attrs, file, line, deps, identity in record.targets:
            rule = self.rules[rule_name]
            label = Label(name, target_name)
            package.targets[target_name] = Target(label, rule, attrs, Location(file, line), deps, identity)
        return package

    def _record(self, package: Package, reads: set[str]) -> None:
        if self.cache is None:
            return
        record = PackageRecord(
            files={relative: self.cache.file_digest(relative) for relative in sorted(reads)},
            globs=list(self._globs),
            targets=[
                (
                    target.label.name,
                    target.rule.name,
                    dict(target.attrs),
                    target.location.file,
                    target.location.line,
                    target.deps,
                    target.identity,
                )
                for target in package.targets.values()
            ],
        )
        self.cache.put(package.name, record)

    # -- evaluation ---------------------------------------------------------------------

    def _evaluate_prelude(self) -> sl.FrozenModule:
        source = "".join(
            f"def {name}(**kwargs):\n    return _declare({name!r}, call_stack(), kwargs, repr(kwargs))\n"
            for name in self.rules
        )
        module = sl.Module()
        module.add_callable("_declare", self._declare)
        sl.eval(module, sl.parse(_PRELUDE, source, sl.Dialect.extended()), _GLOBALS)
        return module.freeze()

    def _evaluate(self, display_path: str, source: str, module: sl.Module) -> set[str]:
        """Evaluate one file with the prelude loaded; return the files it read.

        Every failure becomes a LoadError."""
        self._loading.append(display_path)
        self._sources[display_path] = source
        self._reads.append({display_path})
        try:
            ast = sl.parse(display_path, self._header + source, sl.Dialect.extended())
            sl.eval_with(self._eval_options, module, ast, _GLOBALS, self._file_loader)
        except sl.StarlarkError as error:
            if self._pending is None and self._past_deadline():
                self._pending = LoadError(
                    f"evaluating {display_path} took longer than {self.workspace.load_timeout_s:g} s "
                    "(an endless loop?); loading was stopped",
                    location=_starlark_error(error, source).location,
                    hint="if this BUILD file really needs longer, raise load_timeout_s in the workspace settings",
                )
            failure = self._pending or _starlark_error(error, source)
            if failure.location is None:
                failure.location = _starlark_error(error, source).location
            # Inside a load(), the error must survive the trip through the loading file's eval.
            self._pending = failure if len(self._loading) > 1 else None
            raise failure from None
        finally:
            self._loading.pop()
            reads = self._reads.pop()
        return reads

    def _past_deadline(self) -> bool:
        """Asked by Starlark every thousand or so instructions: whether to stop evaluating.
        Being Python, it also lets Ctrl-C (and SIGTERM) interrupt an endless BUILD file."""
        return time.monotonic() > self._deadline

    def _load_package(self, name: str) -> Package:
        self._deadline = time.monotonic() + self.workspace.load_timeout_s
        build_file = self.workspace.package_dir(name) / BUILD_FILE
        if not build_file.is_file():
            raise LoadError(f"no package '//{name}': {build_file} does not exist")
        package = Package(name, build_file)
        display = str(build_file.relative_to(self.workspace.root))
        module = sl.Module()
        module.add_callable("glob", self._make_glob(name))
        module.add_callable("package_name", lambda: name)
        previous, self._current = self._current, package
        self._globs = []
        try:
            reads = self._evaluate(display, build_file.read_text(), module)
        finally:
            self._current = previous
        package.reads = tuple(sorted(reads))
        self._record(package, reads)
        return package

    def _load_module(self, path: str) -> sl.FrozenModule:
        """starlark's load() callback: resolve `//pkg:file.star` or `:file.star`."""
        if path == _PRELUDE:
            return self._prelude
        requester = self._loading[-1]
        requester_dir = Path(requester).parent.as_posix()
        try:
            label = parse_label(path, "" if requester_dir == "." else requester_dir)
        except LabelError as error:
            self._pending = LoadError(
                f"load({path!r}): {error.message}", location=self._load_statement(requester, path)
            )
            raise
        display = str(Path(label.package) / label.name)
        if display in self._modules:
            self._reads[-1].update(self._module_reads[display])
            return self._modules[display]
        if display in self._loading:
            cycle = " -> ".join([*self._loading[self._loading.index(display) :], display])
            self._pending = LoadError(f"load cycle: {cycle}", location=self._load_statement(requester, path))
            raise RuntimeError(self._pending.message)
        file = self._star_file(requester, path, display)
        module = sl.Module()
        previous, self._current = self._current, None  # a .star file declares no targets of its own
        try:
            self._module_reads[display] = self._evaluate(display, file.read_text(), module)
        finally:
            self._current = previous
        self._reads[-1].update(self._module_reads[display])
        frozen = module.freeze()
        self._modules[display] = frozen
        return frozen

    def _star_file(self, requester: str, path: str, display: str) -> Path:
        """The file `load(path)` in `requester` reads: a `.star` file of the workspace. One
        reached through a symlink out of it is refused, as a source file is (graph.py):
        what loading reads must be what every checkout has."""
        file = self.workspace.root / display
        if not display.endswith(".star") or not file.is_file():
            message, hint = f"no .star file {display}", "load() takes '//pkg:file.star' or ':file.star'"
        elif (real := self.workspace.outside(file)) is not None:
            message = f"{display} is a symlink to {real}, outside the workspace"
            hint = "a .star file must lie inside the workspace: copy it in"
        else:
            return file
        location = self._load_statement(requester, path)
        self._pending = LoadError(f"load({path!r}): {message}", location=location, hint=hint)
        raise RuntimeError(self._pending.message)

    def _load_statement(self, requester: str, path: str) -> Location:
        """The line of `requester` that loads `path` (the load callback is not told)."""
        statement = re.compile(r"^\s*load\s*\(\s*(['\"])" + re.escape(path) + r"\1")
        for number, line in enumerate(self._sources[requester].splitlines(), start=1):
            if statement.match(line):
                return Location(requester, number)
        return Location(requester, 1)

    # -- builtins exposed to Starlark ------------------------------------------------------

    def _make_glob(self, package: str) -> Callable[..., list[str]]:
        root = self.workspace.package_dir(package)

        def glob(include: list[str], exclude: list[str] = (), allow_empty: bool = False) -> list[str]:
            include, exclude = tuple(include), tuple(exclude)
            try:
                names = glob_files(root, include, exclude)
            except ValueError as error:
                self._pending = LoadError(str(error))
                raise
            if not names and not allow_empty:
                self._pending = LoadError(
                    f"glob({list(include)}) matched no files in //{package}",
                    hint="pass allow_empty = True if that is expected",
                )
                raise RuntimeError(self._pending.message)
            self._globs.append(GlobCall(include, exclude, tuple(names)))
            return names

        return glob

    def _declare(self, rule_name: str, stack: str, kwargs: dict[str, Any], source_repr: str) -> None:
        """Called by every rule function: check the attributes and record the target.

        starlark-pyo3 hands values over through JSON, which silently turns NaN and the
        infinities into None; `source_repr` (Starlark's repr of the same values) is where
        they can still be seen.
        """
        location = _first_frame(stack)
        try:
            if ("nan" in source_repr or "inf" in source_repr) and (attr := _non_finite_attribute(source_repr)):
                name = kwargs.get("name")
                raise LoadError(
                    f"{rule_name} '{name}': attribute '{attr}': NaN and infinite numbers are not JSON values",
                    location=location,
                )
            self._declare_at(rule_name, kwargs, location)
        except MarinbuildError as error:
            self._pending = error
            raise RuntimeError(error.message) from None

    def _declare_at(self, rule_name: str, kwargs: dict[str, Any], location: Location) -> None:
        package = self._current
        if package is None:
            raise LoadError(f"{rule_name}() can only be called while loading a BUILD.marin file", location=location)
        rule = self.rules[rule_name]
        name = kwargs.get("name")
        if not isinstance(name, str):
            raise LoadError(f"{rule_name}() needs a string 'name'", location=location)
        try:
            check_name(name, name)
        except LabelError as error:
            raise LoadError(error.message, location=location, hint=error.hint) from None
        what = f"{rule_name} '{name}'"
        if name in package.targets:
            raise LoadError(
                f"target '{name}' is already defined at {package.targets[name].location}", location=location
            )
        unknown = [key for key in kwargs if key not in rule.all_attrs]
        if unknown:
            close = difflib.get_close_matches(unknown[0], rule.all_attrs, n=1)
            raise LoadError(
                f"{what}: unknown attribute '{unknown[0]}'",
                location=location,
                hint=(f"did you mean '{close[0]}'? " if close else "")
                + f"{rule_name} takes: {', '.join(rule.all_attrs)}",
            )
        attrs: dict[str, JsonValue] = {}
        for attr_name, attr in rule.all_attrs.items():
            if attr_name not in kwargs:
                if attr.mandatory:
                    raise LoadError(f"{what}: missing mandatory attribute '{attr_name}'", location=location)
                attrs[attr_name] = attr.default
                continue
            try:
                attrs[attr_name] = attr.type.normalize(kwargs[attr_name], package.name)
            except (ValueError, LabelError) as error:
                raise LoadError(
                    f"{what}: attribute '{attr_name}': {error}", location=location, hint=getattr(error, "hint", None)
                ) from None
        try:
            resources = Resources.from_json(attrs["resources"], rule.resources)
            if resources.processes > 1 and not rule.multi_host:
                raise ValueError(f"resources ask for {resources.processes} hosts, but {rule.name} runs on one host")
            if rule.validate is not None:
                rule.validate(attrs)
        except ValueError as error:
            raise LoadError(f"{what}: {error}", location=location, hint=getattr(error, "hint", None)) from None
        package.targets[name] = Target(Label(package.name, name), rule, attrs, location)


def glob_files(root: Path, include: tuple[str, ...], exclude: tuple[str, ...]) -> list[str]:
    """Files of the package at `root` matching `include` and not `exclude`, sorted.

    Subpackages (directories with their own BUILD file) are not entered, as in Bazel.
    """

    def matches(patterns: tuple[str, ...]) -> set[Path]:
        found: set[Path] = set()
        for pattern in patterns:
            if pattern.startswith("/") or ".." in pattern.split("/"):
                raise ValueError(f"glob pattern '{pattern}' must stay inside the package")
            if pattern == "**" or pattern.endswith("/**"):
                pattern += "/*"  # Path.glob's trailing '**' matches directories only
            found.update(path for path in root.glob(pattern) if path.is_file())
        return found

    return sorted(
        path.relative_to(root).as_posix()
        for path in matches(include) - matches(exclude)
        if path.name != BUILD_FILE and enclosing_subpackage(root, path) is None
    )


def enclosing_subpackage(root: Path, path: Path) -> Path | None:
    """The directory of the innermost subpackage of the package at `root` holding `path`, if any.

    A file below such a directory belongs to that package, not to the one at `root`."""
    directory = path.parent
    while directory != root:
        if (directory / BUILD_FILE).is_file():
            return directory
        directory = directory.parent
    return None
