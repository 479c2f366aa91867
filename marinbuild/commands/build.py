"""`build`: plan the patterns, then run what is stale with its invocation recorded, or, dry,
say what would run and why. A step asking for an accelerator this machine lacks stops a
local build before anything runs. A no-op whose certificate holds is answered from it
(commands/certified.py); a build that could be certified records what it consults, and
certifies itself if every target was cached.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from marinbuild.actions.analysis.graph import Graph
from marinbuild.actions.bookkeeping.events import Tee
from marinbuild.actions.bookkeeping.noop_certificate import Certifying
from marinbuild.actions.bookkeeping.results import BuildResult, Reporter, Status
from marinbuild.actions.execution.accelerators import local_accelerators, missing
from marinbuild.actions.execution.build_options import BuildOptions
from marinbuild.actions.execution.hermetic import COMPILATION_CACHE_DIR, StepSettings, with_compilation_cache
from marinbuild.actions.execution.resume import resume_point
from marinbuild.actions.execution.scheduler import Scheduler
from marinbuild.commands.certified import bookkeeping, noop_certificate, serve_certified
from marinbuild.commands.costs import check_budget, stale_estimates, total_line
from marinbuild.commands.invocation import run_recorded
from marinbuild.consulted import Consulted, code_files, recording
from marinbuild.errors import AcceleratorMissing
from marinbuild.session import Session
from marinbuild.store.mirrors import budget_line


def build(
    session: Session,
    patterns: Sequence[str],
    options: BuildOptions,
    reporter: Reporter,
    events: Path | None = None,
    allow_cpu: bool = False,
) -> BuildResult:
    """Build; the event stream goes to the store with the invocation record, and to `events`.
    Run here (not on Ray), a step asking for an accelerator this machine lacks is an error
    before anything runs, unless `allow_cpu`: JAX would quietly use the CPU."""
    certificate = noop_certificate(session, patterns, options, events, allow_cpu)
    if certificate is not None and (certified := certificate.read()) is not None:
        return serve_certified(session, certified, list(patterns), reporter)
    consulted = None if certificate is None else Consulted(ignored=bookkeeping(session))
    certifying = Certifying(consulted)
    with (
        _spared_by_the_collector() as planned,
        contextlib.nullcontext() if consulted is None else recording(consulted),
    ):
        graph = session.plan(patterns)
        _ = session.cache  # its memo of entries, read now
        planned()
        lacking = {} if options.executor == "ray" or allow_cpu else _lacking_accelerators(graph)
        if options.dry_run:
            return _with_estimates(
                graph, _annotate_dry_run(session, graph, session.scheduler(graph, options, reporter), lacking), options
            )
        if options.max_accelerator_hours is not None:
            estimates = stale_estimates(graph, session.dry_run_graph(graph), options.utilisation)
            check_budget(estimates, options.max_accelerator_hours)
        if lacking:
            _refuse_lacking(session, graph, lacking)
        scheduler = run_recorded(session, "build", graph, list(patterns), options, Tee(reporter, certifying), events)
    if certificate is not None and consulted is not None and scheduler.read_only is None:
        consulted.sign(code_files())
        certificate.write(consulted, scheduler.result, len(graph.targets), certifying.messages)
    return scheduler.result


def step_settings(session: Session, sandbox: bool | None = None) -> StepSettings:
    """How this workspace's steps run (environment, sandbox, default timeout); `sandbox`
    overrides the setting. Steps share this machine's JAX compilation cache, beside its
    local cache of the store (`.marinbuild/jax-cache`), unless the environment names one."""
    workspace = session.workspace
    action_env = with_compilation_cache(workspace.action_env, os.environ, workspace.state_dir / COMPILATION_CACHE_DIR)
    return StepSettings(action_env, workspace.sandbox if sandbox is None else sandbox, workspace.timeout_s)


@contextlib.contextmanager
def _spared_by_the_collector() -> Iterator[Callable[[], None]]:
    """Load and plan without Python's cyclic garbage collector, then freeze what that made
    until the build ends (call the function yielded once planned), and collect the young
    generation less often meanwhile.

    Packages, the graph and the store's memos live as long as the build and hold no
    garbage, but every collection scanned them all again: a seventh to a fifth of a
    10,000-target no-op went to collections that freed nothing. Frozen, they are skipped;
    the young generation is collected every 20,000 allocations instead of 700. All is as
    it was at the end, so a process that builds again frees what it froze."""
    enabled = gc.isenabled()
    thresholds = gc.get_threshold()
    gc.disable()

    def planned() -> None:
        gc.freeze()
        gc.set_threshold(max(thresholds[0], 20_000), *thresholds[1:])
        if enabled:
            gc.enable()

    try:
        yield planned
    finally:
        gc.set_threshold(*thresholds)
        if enabled:
            gc.enable()
        gc.unfreeze()


def _lacking_accelerators(graph: Graph) -> dict[str, str]:
    """{label: what it asks for} for each step whose accelerator this machine lacks."""
    asking = {
        label: target.resources
        for label, target in graph.targets.items()
        if (target.attrs["resources"] or {}).get("accelerator") or target.rule.resources.accelerator
    }
    if not asking:
        return {}  # spare the probe (a process) for the common case
    machine = local_accelerators()
    return {label: need for label, resources in asking.items() if (need := missing(resources, machine)) is not None}


def _annotate_dry_run(session: Session, graph: Graph, scheduler: Scheduler, lacking: dict[str, str]) -> BuildResult:
    """Run `scheduler` dry and add to its reasons what the steps would do besides
    running: resume from an earlier attempt's checkpoints, or stop the build for want
    of an accelerator; and end it with what its copies from mirrors would cost against
    the egress budget (a dry run over it still exits 0: it says so, and stops nothing)."""
    result = scheduler.run()
    egress = scheduler.options.egress
    if egress is not None:
        foreseen = list(scheduler.foreseen.values())
        line = budget_line(foreseen, egress.budget_gb, egress.allowed, egress.setting)
        result.notes.extend([line] if line else [])
    for label, item in result.results.items():
        notes = []
        if item.status is Status.WOULD_RUN and item.key is not None:
            point = resume_point(session.store, graph.targets[label].rule, item.key)
            if point is not None:
                notes.append(f"would resume from {point}")
        if label in lacking and item.status in (Status.WOULD_RUN, Status.PENDING):
            notes.append(f"needs {lacking[label]}, which this machine lacks: a build here stops unless --allow-cpu")
        if notes:
            reason = "; ".join(filter(None, [item.reason, *notes]))
            result.results[label] = dataclasses.replace(item, reason=reason)
    return result


def _with_estimates(graph: Graph, result: BuildResult, options: BuildOptions) -> BuildResult:
    """A dry run's result with each stale training's estimated cost and their total, or the
    refusal of a build whose estimate exceeds `--max-accelerator-hours`."""
    estimates = stale_estimates(graph, result, options.utilisation)
    check_budget(estimates, options.max_accelerator_hours)
    for label, estimated in estimates.items():
        result.results[label] = dataclasses.replace(result.results[label], estimate=estimated.to_json())
    line = total_line(estimates)
    result.notes.extend([line] if line else [])
    return result


def _refuse_lacking(session: Session, graph: Graph, lacking: dict[str, str]) -> None:
    """Stop (exit 2) if a step that would run asks for an accelerator this machine lacks."""
    results = session.dry_run_graph(graph).results
    to_run = [label for label in lacking if results[label].status in (Status.WOULD_RUN, Status.PENDING)]
    if not to_run:
        return
    shown = "; ".join(f"{label} asks for {lacking[label]}" for label in to_run[:5])
    more = f" (and {len(to_run) - 5} more)" if len(to_run) > 5 else ""
    raise AcceleratorMissing(
        f"{shown}{more}, but this machine has {local_accelerators().describe()}: run here, JAX would train on the CPU",
        hint="run it where the accelerator is, with --executor ray (docs/cluster.md), "
        "or pass --allow-cpu to run it on this machine anyway",
    )
