"""The commands that run steps: `build` (the default command), `pin`, and `rerun`."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
from pathlib import Path

import click

from marinbuild.actions.bookkeeping.results import BuildResult
from marinbuild.actions.execution.build_options import BuildOptions
from marinbuild.cli.base import EXIT_FAILED, PatternsCommand, handles_errors, make_reporter, open_session
from marinbuild.cli.progress import PlanReporter
from marinbuild.commands.build import build as build_targets
from marinbuild.commands.build import step_settings
from marinbuild.commands.pin import pin as pin_artifacts
from marinbuild.targets.compute import Estimate
from marinbuild.targets.rule import Resources

_MAX_OUTPUTS_SHOWN = 10  # like Bazel's --show_result: a wildcard over 10,000 targets prints a summary


@click.command(cls=PatternsCommand)
@click.argument("patterns", nargs=-1, required=True)
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Steps run at once (default: CPU count).")
@click.option("--keep-going", "-k", is_flag=True, help="Build what does not depend on a failure.")
@click.option("--dry-run", "-n", is_flag=True, help="Print what would run and why; run nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with every target's result.")
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    help="Where steps run (default: the workspace's setting, else local).",
)
@click.option(
    "--ray-address",
    metavar="ADDRESS",
    help="Ray cluster to run steps on (HOST:PORT or 'auto'; default: the setting, else a new local instance).",
)
@click.option(
    "--ray-placement-timeout",
    type=click.FloatRange(min=0),
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="Fail a step the Ray cluster cannot place within this time.",
)
@click.option(
    "--ray-shared-scratch",
    metavar="DIR",
    help="A directory every Ray node mounts (NFS, Filestore): the scratch space of steps on several hosts "
    "(default: the setting).",
)
@click.option(
    "--explain", "explain", is_flag=True, help="Say why each step runs: what changed since its nearest earlier output."
)
@click.option(
    "--strict-code", is_flag=True, help="Make each rule's source part of its steps' keys (default: its version)."
)
@click.option(
    "--events",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also append the build's event stream (JSON lines) to this file.",
)
@click.option(
    "--sandbox/--no-sandbox",
    default=None,
    help="Run each step's processes with the file system read-only but its own outputs and /tmp "
    "(default: the workspace's 'sandbox' setting).",
)
@click.option(
    "--allow-cpu",
    is_flag=True,
    help="Run steps that ask for a GPU or TPU this machine lacks anyway (JAX then uses the CPU); "
    "without it such a step stops a local build.",
)
@click.option(
    "--allow-egress",
    is_flag=True,
    help="Copy entries from the store's mirrors in other regions even past the egress budget "
    "(egress_budget_gb, default 10 GB a build); without it such a build stops before copying.",
)
@click.option(
    "--max-accelerator-hours",
    type=click.FloatRange(min=0),
    metavar="HOURS",
    help="Refuse (exit 2, before anything runs) a build whose stale trainings would take more "
    "accelerator-hours than this, as estimated from their FLOPs; a dry run prints each estimate.",
)
@click.option(
    "--utilisation",
    type=click.FloatRange(min=0, max=1, min_open=True),
    metavar="FRACTION",
    help="The utilisation (MFU) the estimates assume on every accelerator (default: the workspace's "
    "'utilisation' setting, else 0.4).",
)
@click.pass_context
@handles_errors
def build(
    ctx: click.Context,
    patterns: tuple[str, ...],
    jobs: int | None,
    keep_going: bool,
    dry_run: bool,
    as_json: bool,
    executor: str | None,
    ray_address: str | None,
    ray_placement_timeout: float,
    ray_shared_scratch: str | None,
    explain: bool,
    strict_code: bool,
    events: Path | None,
    sandbox: bool | None,
    allow_cpu: bool,
    allow_egress: bool,
    max_accelerator_hours: float | None,
    utilisation: float | None,
) -> None:
    """Build the targets matched by PATTERNS (`//pkg:name`, `//pkg:all`, `//pkg/...`, `-PATTERN`)."""
    session = open_session(ctx)
    executor = executor or session.workspace.executor
    options = BuildOptions(
        jobs=jobs or session.workspace.jobs or os.cpu_count() or 1,
        keep_going=keep_going,
        dry_run=dry_run,
        executor=executor,
        ray_address=ray_address or session.workspace.ray_address,
        ray_placement_timeout_s=ray_placement_timeout,
        ray_shared_scratch=ray_shared_scratch or session.workspace.ray_shared_scratch,
        strict_code=strict_code,
        explain=explain,
        steps=step_settings(session, sandbox),
        egress=session.egress(allow_egress),
        utilisation=session.workspace.utilisation if utilisation is None else utilisation,
        max_accelerator_hours=max_accelerator_hours,
    )
    if executor == "ray":  # the cluster queues steps by their resources, not this machine
        options = dataclasses.replace(options, capacity=Resources(cpu=math.inf, memory_gb=math.inf))
    # A dry run's plan is its result, on stdout: stderr has only its warnings and counts.
    reporter = PlanReporter() if dry_run else make_reporter(live=sys.stderr.isatty())
    # Ray's driver prints what its workers report (a worker died...) on sys.stdout, which
    # holds only results here: send it to stderr, with the rest of the build's chatter.
    with contextlib.redirect_stdout(sys.stderr) if executor == "ray" else contextlib.nullcontext():
        result = build_targets(session, patterns, options, reporter, events, allow_cpu)
    if as_json:
        click.echo(result.to_json_text())
    elif dry_run:
        for item in result.results.values():
            click.echo(f"{item.status.value:9} {item.label}" + (f"  ({item.reason})" if item.reason else ""))
            if item.description:
                click.echo(f"{'':9} {item.description}")
            if item.estimate:
                click.echo(f"{'':9} estimate: {Estimate.from_json(item.estimate).describe()}")
        for note in result.notes:
            click.echo(note)
    else:
        for line in _output_lines(result):
            click.echo(line)
    sys.exit(0 if result.ok else EXIT_FAILED)


def _output_lines(result: BuildResult) -> list[str]:
    """Where each requested target's output is, with its headline (a final loss) under it.
    Past _MAX_OUTPUTS_SHOWN targets, only those with a headline, whatever their number (a
    datamix build of 22 targets still ends with its eval loss), and a count of the rest."""
    lines = []
    left_out = 0
    many = len(result.requested) > _MAX_OUTPUTS_SHOWN
    for label in result.requested:
        item = result.results[label]
        if item.output is None:
            continue
        if many and not item.headline:
            left_out += 1
            continue
        lines.append(f"{label}: {item.output}" + (f"\n  {item.headline}" if item.headline else ""))
    if left_out:
        lines.append(f"{left_out} more targets requested; 'marinbuild where LABEL' prints where one is")
    return lines


@click.command(cls=PatternsCommand)
@click.argument("patterns", nargs=-1, required=True)
@click.pass_context
@handles_errors
def pin(ctx: click.Context, patterns: tuple[str, ...]) -> None:
    """Pin the external artifacts PATTERNS name: list what each URL holds (names, sizes,
    checksums; nothing is downloaded) and record the listing's digest in marinbuild.lock,
    to commit with the BUILD files. Builds stop if the objects change afterwards."""
    for pinned in pin_artifacts(open_session(ctx), patterns):
        pin_ = pinned.pin
        if pinned.previous is not None and pinned.previous.digest == pin_.digest:
            verdict = "unchanged"
        elif pinned.previous is None:
            verdict = "pinned"
        else:
            verdict = "re-pinned: its dependents rebuild"
        click.echo(
            f"{pinned.label}: {pin_.url}: {pin_.objects} objects, {pin_.bytes:,} bytes, {pin_.digest[:12]} {verdict}"
        )
        for change in pinned.changes:
            click.echo(f"    {change}")


@click.command()
@click.argument("key")
@click.option("--check", is_flag=True, help="Run it again even though it is cached, aside, and compare.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Steps run at once (default: CPU count).")
@click.pass_context
@handles_errors
def rerun(ctx: click.Context, key: str, check: bool, jobs: int | None) -> None:
    """Rebuild exactly the recipe stored under KEY, from the store alone (the BUILD files
    may have changed or be gone). With --check, compare a fresh run with the stored output:
    byte for byte, or by metrics within the rule's tolerance (training)."""
    from marinbuild.commands import rerun as reruns  # a build loads none of what rerun reads

    session = open_session(ctx)
    options = BuildOptions(jobs=jobs or session.workspace.jobs or os.cpu_count() or 1, steps=step_settings(session))
    reporter = make_reporter(live=sys.stderr.isatty())
    if check:
        report = reruns.check(session, key, options, reporter)
        if report.identical:
            click.echo(f"{report.label} ({report.key[:12]}): the rerun matches the stored output ({report.compared})")
            return
        click.echo(f"{report.label} ({report.key[:12]}): the rerun differs from the stored output ({report.compared}):")
        for difference in report.differences:
            click.echo(f"  {difference}")
        click.echo(f"  the rerun's outputs: {report.side}")
        sys.exit(EXIT_FAILED)
    result = reruns.rerun(session, key, options, reporter)
    item = result.build.results[result.label]
    if result.changes:
        click.echo(f"{result.label}: rebuilt here, the recipe has another key ({item.key}):")
        for change in result.changes:
            click.echo(f"  {change}")
    elif item.output is not None:
        same = {
            True: "; byte-identical to the recorded output",
            False: "; it differs from the recorded output",
            None: "",
        }
        click.echo(f"{result.label} ({result.key[:12]}): {item.status.value}{same[result.identical]}\n  {item.output}")
    sys.exit(0 if result.ok and result.identical is not False else EXIT_FAILED)
