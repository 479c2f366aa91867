"""The no-op certificate: a whole no-op build answered by checking what the last one read.

A no-op of 10,000 targets spends most of its time re-deriving what it derived last time:
the packages, the graph, every key and look-up, every result. After a build on a local
store in which every target was cached, its certificate holds the signature of every path
that build consulted (`consulted.py`: every `stat`, listing and read, recorded under all
the layers) and the results it reported. The next build of the same command in the same
context — marinbuild's version, Python, the patterns and options, the workspace and its
settings, the store, the environment but the shell's bookkeeping — stats those paths; if
none changed, nothing the full check reads changed, so it would reach the same results,
and they are reported without building the graph, keys or results. Anything else — a
path changed or gone, an unreadable certificate, another context — and the build takes
the full path, which writes a new one. `tests/engine/actions/test_noop_certificate.py` shows both paths
give the same answer after each kind of change.

One certificate per context (`<digest of the context>.pickle` under `.marinbuild/noop/`),
the newest few kept: builds alternating between two environments keep theirs each.
"""

from __future__ import annotations

import gc
import os
import pickle
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marinbuild.actions.bookkeeping.results import BuildResult, NullReporter, Status, TargetResult
from marinbuild.consulted import Consulted, unchanged
from marinbuild.hashing import digest_json

# "0": never read nor write a certificate (the full check every time, as before).
NOOP_CERTIFICATE_ENV = "MARINBUILD_NOOP_CERTIFICATE"
# Bumped whenever what a certificate holds changes shape: an older one is then not read.
_FORMAT = 1
# What a shell or an ssh session sets for its own bookkeeping and no build decides from: the
# directory before the last `cd`, the nesting depth, the command's path, the connection's
# addresses and ports. Part of the context, each `cd` or login would cost one full no-op.
SESSION_VARIABLES = frozenset({"OLDPWD", "SHLVL", "_", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY"})
_KEPT = 4  # certificates per workspace, the newest (10 MB each for 10,000 targets); another context makes its own


@dataclass(frozen=True)
class Certified:
    """What the certified build reported: its results in the graph's order (every one
    `cached`), their JSON, the number of targets it started with, and its warnings."""

    requested: list[str]
    results: dict[str, TargetResult]
    targets_json: str
    total: int
    warnings: list[str]

    def build_result(self) -> BuildResult:
        return BuildResult.with_targets_json(list(self.requested), dict(self.results), self.targets_json)


class Certifying(NullReporter):
    """What a certificate takes from a build's reports: its warnings (a certified no-op
    reports them again), and whether a step ran: a build that runs one certifies nothing,
    so the first ends the recording of what it consults (`consulted`)."""

    def __init__(self, consulted: Consulted | None) -> None:
        self.consulted = consulted
        self.messages: list[str] = []

    def warning(self, message: str) -> None:
        self.messages.append(message)

    def step_started(self, label: str) -> None:
        if self.consulted is not None:
            self.consulted.abandon()


def environment_context(environment: Mapping[str, str]) -> dict[str, str]:
    """The environment as a certificate's context holds it: all of it but `SESSION_VARIABLES`."""
    return {name: value for name, value in environment.items() if name not in SESSION_VARIABLES}


class NoopCertificate:
    """The certificate of one command in one context (`context`: JSON, hashed to name it)."""

    def __init__(self, directory: Path, context: dict[str, Any]):
        self.directory = directory
        self.digest = digest_json(context)
        self.path = directory / f"{self.digest}.pickle"

    def read(self) -> Certified | None:
        """The certified results if the certificate is readable, of this context, and no
        path it signs has changed; None otherwise (the build takes the full path)."""
        try:
            found_format, digest, followed, links, certified = pickle.loads(self.path.read_bytes())
        except (OSError, EOFError, ValueError, TypeError, pickle.UnpicklingError, AttributeError, ImportError):
            return None
        if found_format != _FORMAT or digest != self.digest or not isinstance(certified, Certified):
            return None
        return certified if unchanged(followed, links) else None

    def write(self, consulted: Consulted, result: BuildResult, total: int, warnings: list[str]) -> bool:
        """Certify `result` as what a build consulting `consulted` reports, if every target
        was cached and every path consulted was modified outside the racy window (else the
        next no-op, the files settled, writes it). Atomic: a reader sees a whole one or none."""
        if not consulted.settled or not result.results:
            return False
        if any(item.status is not Status.CACHED for item in result.results.values()):
            return False
        certified = Certified(list(result.requested), result.results, result.targets_json(), total, warnings)
        # Pickling gives each result the attribute dict it had none of: 100,000 new tracked
        # objects, which set off collections over the whole heap the build has unfrozen
        # (commands/build.py), 1.5 s of a 100,000-target no-op. They make no garbage.
        collecting = gc.isenabled()
        gc.disable()
        try:
            payload = pickle.dumps(
                (_FORMAT, self.digest, consulted.followed, consulted.links, certified),
                protocol=pickle.HIGHEST_PROTOCOL,
            )
        finally:
            if collecting:
                gc.enable()
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = self.directory / f".{self.digest}.{uuid.uuid4().hex}.tmp"
        temporary.write_bytes(payload)
        os.replace(temporary, self.path)
        self._prune()
        return True

    def _prune(self) -> None:
        """Keep the newest `_KEPT` certificates (a context seen once costs nothing for long)."""
        kept = sorted(self.directory.glob("*.pickle"), key=_modified, reverse=True)
        for old in kept[_KEPT:]:
            old.unlink(missing_ok=True)


def _modified(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:  # pruned by another build meanwhile
        return 0
