"""The workspace: the tree of packages under a root that holds marinbuild's settings.

The root is the nearest directory, from the current one upwards, with a
`marinbuild.toml` or a `pyproject.toml` containing a `[tool.marinbuild]` table.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from marinbuild.errors import Location, WorkspaceError, did_you_mean
from marinbuild.targets.compute import Utilisation, check_utilisation

BUILD_FILE = "BUILD.marin"
_KNOWN_SETTINGS = {
    "store",
    "jobs",
    "rules",
    "ignore",
    "executor",
    "ray_address",
    "ray_shared_scratch",
    "action_env",
    "sandbox",
    "timeout_s",
    "load_timeout_s",
    "store_timeout_s",
    "store_retry_budget_s",
    "mirrors",
    "region",
    "egress_budget_gb",
    "utilisation",
}
EXECUTORS = ("local", "ray")
# Never packages: VCS data, virtual environments, caches. The store is added at runtime.
_ALWAYS_IGNORED = {".git", ".hg", "node_modules", "__pycache__", ".venv", "venv", ".marinbuild"}
_VENV_MARKER = "pyvenv.cfg"  # what makes a directory a virtual environment, whatever its name


@dataclass(frozen=True)
class Workspace:
    root: Path
    config_file: Path
    store: str = "cache"
    jobs: int | None = None
    rule_modules: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    executor: str = "local"
    ray_address: str | None = None
    ray_shared_scratch: str | None = None
    # What steps see (marinbuild/actions/execution/hermetic.py): environment variables passed or set
    # ("NAME", "NAME=value"), the sandbox, and the time limit of a target without `timeout`.
    action_env: tuple[str, ...] = ()
    sandbox: bool = False
    timeout_s: float | None = None
    # How long one BUILD file's evaluation (with the .star files it loads) may take.
    load_timeout_s: float = 60.0
    # A remote store's deadlines (store/deadlines.py): seconds a request may go unanswered,
    # and seconds an operation may keep failing before the build stops. None: the default.
    store_timeout_s: float | None = None
    store_retry_budget_s: float | None = None
    # A store in several regions (store/mirrors.py): buckets holding copies of the same
    # store, the region this builder runs in (None: the store's own bucket is local), and
    # how many GB a build may copy across regions without --allow-egress.
    mirrors: tuple[str, ...] = ()
    region: str | None = None
    egress_budget_gb: float = 10.0
    # The utilisation (MFU) an estimate of accelerator-hours assumes (targets/compute.py):
    # a fraction for every kind, or a table by kind; None: each kind's default.
    utilisation: Utilisation = None

    def setting_location(self, name: str) -> Location | None:
        """The line of the settings file that sets `name`, for an error about it (None if
        it is not set there: it has its default). TOML parsers keep no line numbers, so it
        is the first line that assigns it, after `[tool.marinbuild]` in a pyproject.toml."""
        lines = self.config_file.read_text().splitlines()
        start = 0
        if self.config_file.name == "pyproject.toml":
            start = next((n for n, line in enumerate(lines) if line.strip() == "[tool.marinbuild]"), 0)
        for number in range(start, len(lines)):
            if lines[number].split("=", 1)[0].strip() == name and "=" in lines[number]:
                return Location(self.config_file.relative_to(self.root).as_posix(), number + 1)
        return None

    @property
    def state_dir(self) -> Path:
        """Machine-local state (stat cache) that is never shared and never committed."""
        return self.root / ".marinbuild"

    def package_dir(self, package: str) -> Path:
        return self.root / package if package else self.root

    def package_of(self, directory: Path) -> str:
        """The package path of `directory`, for resolving relative command-line labels."""
        try:
            relative = directory.resolve().relative_to(self.root)
        except ValueError:
            return ""
        return "" if str(relative) == "." else relative.as_posix()

    def outside(self, path: Path) -> Path | None:
        """Where `path` really is, when a symlink on its way leads out of the workspace
        (None when it stays inside). What a build reads from the workspace — sources,
        `.star` files — must lie in it: a link to `/etc` would put this machine's files in
        the store for everyone, or make loading depend on files no checkout has."""
        real = path.resolve()
        return None if real.is_relative_to(self.root.resolve()) else real

    def find_packages(self, below: str = "", skip: tuple[Path, ...] = ()) -> list[str]:
        """Every package at or below `below`, sorted; hidden and ignored directories are skipped,
        and virtual environments (a directory holding `pyvenv.cfg`). Symlinked directories are
        not entered.

        One `os.scandir` per directory, and package names made from the names walked: a
        recursive pattern over 500 packages would otherwise spend more time in `stat` calls
        (is there a `pyvenv.cfg`? where does this path resolve to?) than in listing them."""
        ignored = {str((self.root / entry).resolve()) for entry in self.ignore} | {str(path.resolve()) for path in skip}
        packages: list[str] = []
        pending = [(str(self.package_dir(below)), below, True)]
        while pending:
            directory, package, is_start = pending.pop()
            try:
                with os.scandir(directory) as listing:
                    entries = {entry.name: entry for entry in listing}
            except OSError:
                continue  # unreadable or gone: as os.walk, skip it
            if not is_start and _VENV_MARKER in entries:
                continue
            build_file = entries.get(BUILD_FILE)
            if build_file is not None and not build_file.is_dir():
                packages.append(package)
            for name, entry in entries.items():
                if name.startswith(".") or name in _ALWAYS_IGNORED or entry.path in ignored:
                    continue
                if _is_real_dir(entry):
                    pending.append((entry.path, f"{package}/{name}" if package else name, False))
        return sorted(packages)


def _is_real_dir(entry: os.DirEntry[str]) -> bool:
    """A directory, not a symlink to one (os.walk does not follow those either)."""
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _read_settings(config_file: Path) -> dict | None:
    try:
        data = tomllib.loads(config_file.read_text())
    except tomllib.TOMLDecodeError as error:
        raise WorkspaceError(f"{config_file}: invalid TOML: {error}") from None
    if config_file.name == "pyproject.toml":
        return data.get("tool", {}).get("marinbuild")
    return data


def open_workspace(directory: Path) -> Workspace:
    """Find the workspace containing `directory` (or rooted at it) and read its settings."""
    start = directory.resolve()
    for candidate in (start, *start.parents):
        for name in ("marinbuild.toml", "pyproject.toml"):
            config_file = candidate / name
            if config_file.is_file() and (settings := _read_settings(config_file)) is not None:
                return _workspace_from(candidate, config_file, settings)
    raise WorkspaceError(
        f"no marinbuild workspace at or above {start}",
        hint="create a marinbuild.toml (it may be empty) at the root of your project, or pass --workspace DIR",
    )


def _workspace_from(root: Path, config_file: Path, settings: dict) -> Workspace:
    unknown = set(settings) - _KNOWN_SETTINGS
    if unknown:
        close = next(filter(None, (did_you_mean(name, _KNOWN_SETTINGS) for name in sorted(unknown))), None)
        raise WorkspaceError(
            f"{config_file}: unknown settings {sorted(unknown)}",
            hint=(f"{close} " if close else "") + f"known settings: {sorted(_KNOWN_SETTINGS)}",
        )
    jobs = settings.get("jobs")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise WorkspaceError(f"{config_file}: 'jobs' must be a positive integer, got {jobs!r}")
    store = settings.get("store", "cache")
    if not isinstance(store, str) or not store:
        raise WorkspaceError(f"{config_file}: 'store' must be a directory or URL string, got {store!r}")
    executor = settings.get("executor", "local")
    if executor not in EXECUTORS:
        raise WorkspaceError(f"{config_file}: 'executor' must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    ray_address = settings.get("ray_address")
    if ray_address is not None and not isinstance(ray_address, str):
        raise WorkspaceError(
            f"{config_file}: 'ray_address' must be a string (HOST:PORT, 'auto' or 'local'), got {ray_address!r}"
        )
    shared_scratch = settings.get("ray_shared_scratch")
    if shared_scratch is not None and not (isinstance(shared_scratch, str) and shared_scratch.startswith("/")):
        raise WorkspaceError(
            f"{config_file}: 'ray_shared_scratch' must be an absolute path every node mounts, got {shared_scratch!r}"
        )
    sandbox = settings.get("sandbox", False)
    if not isinstance(sandbox, bool):
        raise WorkspaceError(f"{config_file}: 'sandbox' must be true or false, got {sandbox!r}")
    load_timeout_s = _seconds(settings, "load_timeout_s", config_file)
    mirrors = _string_list(settings, "mirrors", config_file)
    for mirror in mirrors:
        if not mirror.startswith("gs://") or not mirror.removeprefix("gs://").strip("/"):
            raise WorkspaceError(
                f"{config_file}: 'mirrors' lists gs:// buckets (copies are GCS rewrites), got {mirror!r}",
                hint='e.g. mirrors = ["gs://team-eu-west4/mb"]',
            )
    region = settings.get("region")
    if region is not None and (not isinstance(region, str) or not region):
        raise WorkspaceError(f"{config_file}: 'region' must be a GCS region such as 'us-central2', got {region!r}")
    egress_budget_gb = settings.get("egress_budget_gb", Workspace.egress_budget_gb)
    if isinstance(egress_budget_gb, bool) or not isinstance(egress_budget_gb, (int, float)) or egress_budget_gb < 0:
        raise WorkspaceError(
            f"{config_file}: 'egress_budget_gb' must be a number of GB (0 or more), got {egress_budget_gb!r}"
        )
    try:
        utilisation = check_utilisation(settings.get("utilisation"), f"{config_file}: 'utilisation'")
    except ValueError as error:
        raise WorkspaceError(
            str(error), hint="e.g. utilisation = 0.45, or utilisation = { v5p = 0.5, H100 = 0.35 }"
        ) from None
    return Workspace(
        utilisation=utilisation,
        mirrors=mirrors,
        region=region,
        egress_budget_gb=float(egress_budget_gb),
        root=root,
        store_timeout_s=_seconds(settings, "store_timeout_s", config_file),
        store_retry_budget_s=_seconds(settings, "store_retry_budget_s", config_file),
        action_env=_string_list(settings, "action_env", config_file),
        sandbox=sandbox,
        timeout_s=_seconds(settings, "timeout_s", config_file),
        load_timeout_s=Workspace.load_timeout_s if load_timeout_s is None else load_timeout_s,
        executor=executor,
        ray_address=ray_address,
        ray_shared_scratch=shared_scratch,
        config_file=config_file,
        store=store,
        jobs=jobs,
        rule_modules=_string_list(settings, "rules", config_file),
        ignore=_string_list(settings, "ignore", config_file),
    )


def _seconds(settings: dict, name: str, config_file: Path) -> float | None:
    value = settings.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise WorkspaceError(f"{config_file}: '{name}' must be a positive number of seconds, got {value!r}")
    return float(value)


def _string_list(settings: dict, name: str, config_file: Path) -> tuple[str, ...]:
    value = settings.get(name, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise WorkspaceError(f"{config_file}: '{name}' must be a list of strings, got {value!r}")
    return tuple(value)
