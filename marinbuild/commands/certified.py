"""A no-op build answered by its certificate (actions/bookkeeping/noop_certificate.py): which
builds a certificate may answer, in what context, and how its answer is reported, streamed
and recorded exactly as the full path would."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from marinbuild import store as stores
from marinbuild.actions.bookkeeping.build_provenance import Provenance
from marinbuild.actions.bookkeeping.events import EventStream, Tee
from marinbuild.actions.bookkeeping.noop_certificate import (
    NOOP_CERTIFICATE_ENV,
    Certified,
    NoopCertificate,
    environment_context,
)
from marinbuild.actions.bookkeeping.results import BuildResult, Reporter
from marinbuild.actions.execution.build_options import BuildOptions
from marinbuild.commands.invocation import InvocationRecord
from marinbuild.session import Session
from marinbuild.store.layout import BOOKKEEPING_AREAS
from marinbuild.store.records import Records
from marinbuild.version import __version__


def noop_certificate(
    session: Session, patterns: Sequence[str], options: BuildOptions, events: Path | None, allow_cpu: bool
) -> NoopCertificate | None:
    """The certificate of this build, if it is one a certificate may answer: a real
    build (not dry, not explained) run here, on a local store without mirrors, its
    events going nowhere else, by a session that has loaded no package yet (one that
    has would not consult their files again). Its context is everything besides the
    files consulted that the build's answer may depend on."""
    if options.dry_run or options.explain or options.executor != "local" or events is not None:
        return None
    if "loader" in vars(session):  # a session that planned before (a notebook's): packages in memory
        return None
    if session.workspace.mirrors or os.environ.get(NOOP_CERTIFICATE_ENV) == "0":
        return None
    if stores.parse_store_url(session.store_url).local_directory is None:
        return None
    context = {
        "command": "build",
        "marinbuild": __version__,
        "python": sys.version,
        "executable": sys.executable,
        "sys_path": sys.path,
        "patterns": list(patterns),
        "options": repr(options),
        "allow_cpu": allow_cpu,
        "cwd": os.fspath(session.cwd),
        "workspace": repr(session.workspace),
        "store": session.store_url,
        "unsafe_no_locking": session.unsafe_no_locking,
        "environment": environment_context(os.environ),
    }
    return NoopCertificate(session.workspace.state_dir / "noop", context)


def bookkeeping(session: Session) -> tuple[str, ...]:
    """What every build writes and none decides from: the machine's memos (each a
    checked shortcut), and the store's records, leases and staging."""
    store = stores.parse_store_url(session.store_url).local_directory
    areas = () if store is None else tuple(os.fspath(store / area) for area in BOOKKEEPING_AREAS)
    return (os.fspath(session.workspace.state_dir), *areas)


def serve_certified(session: Session, certified: Certified, patterns: list[str], reporter: Reporter) -> BuildResult:
    """A no-op answered by its certificate: reported, streamed and recorded as the full
    path reports, streams and records it; the record says it was certified."""
    store = stores.open_store(session.store_url, session.workspace.state_dir)  # no memo: nothing is verified here
    stores.require_leases(store, session.unsafe_no_locking)
    stream = EventStream()
    tee = Tee(reporter, stream)
    invocation = InvocationRecord(
        session, Records(store), "build", patterns, Provenance(session.workspace.root), list(certified.results)
    )
    invocation.write(BuildResult(certified.requested), "running", certified=True)
    started = time.monotonic()
    tee.build_started(certified.total)
    for item in certified.results.values():
        tee.step_finished(item)
    for message in certified.warnings:
        tee.warning(message)
    result = certified.build_result()
    result.elapsed_s = time.monotonic() - started
    tee.build_finished(result)
    invocation.write(result, "succeeded", stream, certified=True)
    return result
