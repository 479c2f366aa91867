"""The `marinbuild` command. The one place where errors are caught and printed.

Exit status: 0 success, 1 a step failed, 2 bad input or usage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import math
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

import marinbuild
from marinbuild import provenance
from marinbuild import store as stores
from marinbuild.actions.results import Reporter
from marinbuild.actions.scheduler import BuildOptions
from marinbuild.cli import records
from marinbuild.cli.progress import PlainReporter
from marinbuild.errors import MarinbuildError, StoreError
from marinbuild.query import FORMATS, from_command_line
from marinbuild.session import Session
from marinbuild.store import maintenance
from marinbuild.targets.rule import Resources

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
_MAX_OUTPUTS_SHOWN = 10  # like Bazel's --show_result: a wildcard over 10,000 targets prints a summary


def _fail(error: MarinbuildError) -> None:
    lines = [f"marinbuild: error: {error}"]
    if error.hint:
        lines.append(f"  hint: {error.hint}")
    click.echo("\n".join(lines), err=True)
    sys.exit(EXIT_BAD_INPUT)


def _handles_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except MarinbuildError as error:
            _fail(error)
        except KeyboardInterrupt:
            # Running steps got the same SIGINT from the terminal; nothing they made is published.
            click.echo("marinbuild: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)

    return wrapper


def _shared_setting(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """Record a shared option in the invocation's settings, the dict every command's context shares.

    Click parses the outer command before the inner one, so a value given after a
    subcommand replaces one given before it; an option left out keeps the outer value.
    """
    settings = ctx.ensure_object(dict)
    assert param.name is not None
    if ctx.get_parameter_source(param.name) in (None, ParameterSource.DEFAULT):
        settings.setdefault(param.name, value)
    else:
        settings[param.name] = value


def _shared_options() -> list[click.Parameter]:
    """--workspace, --store and --unsafe-no-locking: fresh ones for each command that takes them."""
    return [
        click.Option(
            ["--workspace"],
            type=click.Path(file_okay=False, path_type=Path),
            expose_value=False,
            callback=_shared_setting,
            help="Workspace root (default: found from the current directory).",
        ),
        click.Option(
            ["--store", "store_url"],
            metavar="URL",
            expose_value=False,
            callback=_shared_setting,
            help="Store URL or directory (default: the workspace's setting, else cache/).",
        ),
        click.Option(
            ["--unsafe-no-locking"],
            is_flag=True,
            expose_value=False,
            callback=_shared_setting,
            help="Build on a store without leases (fsspec URLs other than gs://): "
            "the same step may run on two machines at once.",
        ),
    ]


class _SharedOptionsGroup(click.Group):
    """A group each of whose commands takes the shared options too, as users type them after
    the command (`marinbuild build //x --store DIR`, as with Bazel), not only before it.

    Nested groups are of this class too (`marinbuild cache gc --store DIR`), and a command
    added later takes them without declaring anything.
    """

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        cmd.params.extend(_shared_options())
        super().add_command(cmd, name)


class _DefaultToBuild(_SharedOptionsGroup):
    """`marinbuild //x:all` is `marinbuild build //x:all`."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        if args and args[0] not in self.commands and not args[0].startswith("--"):
            args = ["build", *args]
        return super().resolve_command(ctx, args)


@click.group(cls=_DefaultToBuild, params=_shared_options(), context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(marinbuild.__version__, prog_name="marinbuild")
def cli() -> None:
    """A content-addressed build system for training foundation models.

    --workspace, --store and --unsafe-no-locking go before the command or after it
    (`marinbuild build //x:all --store DIR`); given in both places, the one after the
    command wins.
    """


def _session(ctx: click.Context) -> Session:
    settings = ctx.ensure_object(dict)
    return Session.open(
        settings.get("workspace"), settings.get("store_url"), unsafe_no_locking=settings.get("unsafe_no_locking", False)
    )


class _BuildCommand(click.Command):
    """Accepts subtractions (`-//pkg:x`, `-:x`, `-pkg/...`) among the options, not only after `--`.

    An argument starting with '-' whose rest looks like a label (it contains '/', ':' or
    '...') is a pattern; anything else is an option, so typos are still reported.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            split = args.index("--")
            head, tail = args[:split], args[split + 1 :]
        else:
            head, tail = args, []
        options: list[str] = []
        patterns: list[str] = []  # in the order given: subtraction is order-sensitive
        takes_value = {name for param in self.params if not getattr(param, "is_flag", True) for name in param.opts}
        arguments = iter(head)
        for arg in arguments:
            if arg in takes_value:
                options += [arg, next(arguments, "")]
            elif arg.startswith("-") and not _is_subtraction(arg):
                options.append(arg)
            else:
                patterns.append(arg)
        return super().parse_args(ctx, [*options, "--", *patterns, *tail])


def _is_subtraction(arg: str) -> bool:
    return (
        arg.startswith("-") and not arg.startswith("--") and any(mark in arg for mark in "/:") or arg.startswith("-...")
    )


@cli.command(cls=_BuildCommand)
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
@click.pass_context
@_handles_errors
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
) -> None:
    """Build the targets matched by PATTERNS (`//pkg:name`, `//pkg:all`, `//pkg/...`, `-PATTERN`)."""
    session = _session(ctx)
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
        steps=session.step_settings(sandbox),
        egress=session.egress(allow_egress),
    )
    if executor == "ray":  # the cluster queues steps by their resources, not this machine
        options = dataclasses.replace(options, capacity=Resources(cpu=math.inf, memory_gb=math.inf))
    reporter = _reporter(live=sys.stderr.isatty() and not dry_run)
    # Ray's driver prints what its workers report (a worker died...) on sys.stdout, which
    # holds only results here: send it to stderr, with the rest of the build's chatter.
    with contextlib.redirect_stdout(sys.stderr) if executor == "ray" else contextlib.nullcontext():
        result = session.build(patterns, options, reporter, events, allow_cpu)
    if as_json:
        click.echo(result.to_json_text())
    elif dry_run:
        for item in result.results.values():
            click.echo(f"{item.status.value:9} {item.label}" + (f"  ({item.reason})" if item.reason else ""))
            if item.description:
                click.echo(f"{'':9} {item.description}")
        for note in result.notes:
            click.echo(note)
    elif len(result.requested) <= _MAX_OUTPUTS_SHOWN:
        for label in result.requested:
            item = result.results[label]
            if item.output is not None:
                click.echo(f"{label}: {item.output}" + (f"\n  {item.headline}" if item.headline else ""))
    else:
        click.echo(f"{len(result.requested)} targets requested; 'marinbuild where LABEL' prints where one is")
    sys.exit(0 if result.ok else EXIT_FAILED)


@cli.command(cls=_BuildCommand)
@click.argument("patterns", nargs=-1, required=True)
@click.pass_context
@_handles_errors
def pin(ctx: click.Context, patterns: tuple[str, ...]) -> None:
    """Pin the external artifacts PATTERNS name: list what each URL holds (names, sizes,
    checksums; nothing is downloaded) and record the listing's digest in marinbuild.lock,
    to commit with the BUILD files. Builds stop if the objects change afterwards."""
    for pinned in _session(ctx).pin(patterns):
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


@cli.command()
@click.argument("label")
@click.pass_context
@_handles_errors
def where(ctx: click.Context, label: str) -> None:
    """Print the output directory of a built target (for one built only in a mirror in
    another region: its URL there, and a note on stderr saying so)."""
    location, note = _session(ctx).location(label)
    if note:
        click.echo(f"marinbuild: note: {note}", err=True)
    click.echo(location)


@cli.command()
@click.argument("target")
@click.option("--recursive", "-r", is_flag=True, help="Also show what made each input, down to the sources.")
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
@click.pass_context
@_handles_errors
def show(ctx: click.Context, target: str, recursive: bool, as_json: bool) -> None:
    """Show what made an output, named by its LABEL or its KEY (or a prefix of it): the
    recipe with its inputs' digests, who built it where and when with which versions, its
    files, and the metrics of an ML step."""
    description, note = _session(ctx).show(target, recursive)
    if note:
        click.echo(f"marinbuild: note: {note}", err=True)
    if as_json:
        click.echo(json.dumps(description, indent=2))
        return
    for line in records.show_lines(description):
        click.echo(line)


@cli.command()
@click.argument("key")
@click.option("--check", is_flag=True, help="Run it again even though it is cached, aside, and compare.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Steps run at once (default: CPU count).")
@click.pass_context
@_handles_errors
def rerun(ctx: click.Context, key: str, check: bool, jobs: int | None) -> None:
    """Rebuild exactly the recipe stored under KEY, from the store alone (the BUILD files
    may have changed or be gone). With --check, compare a fresh run with the stored output:
    byte for byte, or by metrics within the rule's tolerance (training)."""
    session = _session(ctx)
    options = BuildOptions(jobs=jobs or session.workspace.jobs or os.cpu_count() or 1, steps=session.step_settings())
    reporter = _reporter(live=sys.stderr.isatty())
    if check:
        report = session.check(key, options, reporter)
        if report.identical:
            click.echo(f"{report.label} ({report.key[:12]}): the rerun matches the stored output ({report.compared})")
            return
        click.echo(f"{report.label} ({report.key[:12]}): the rerun differs from the stored output ({report.compared}):")
        for difference in report.differences:
            click.echo(f"  {difference}")
        click.echo(f"  the rerun's outputs: {report.side}")
        sys.exit(EXIT_FAILED)
    result = session.rerun(key, options, reporter)
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


@cli.command("explain")
@click.argument("label")
@click.option("--strict-code", is_flag=True, help="As a build with --strict-code would key it.")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
@click.pass_context
@_handles_errors
def explain_command(ctx: click.Context, label: str, strict_code: bool, as_json: bool) -> None:
    """Say whether LABEL would run and why: each ingredient of its key, and for a miss what
    changed since its nearest earlier output (field by field)."""
    explanation = _session(ctx).explain(label, strict_code)
    if as_json:
        click.echo(json.dumps(explanation.to_json(), indent=2))
        return
    for line in records.explanation_lines(explanation):
        click.echo(line)


@cli.command()
@click.argument("label")
@click.option(
    "--attempt",
    "number",
    type=int,
    default=-1,
    show_default=True,
    help="Which attempt: 1 is the first, -1 the newest ('marinbuild log --list' numbers them).",
)
@click.option("--list", "list_only", is_flag=True, help="List the target's attempts instead of printing a log.")
@click.pass_context
@_handles_errors
def log(ctx: click.Context, label: str, number: int, list_only: bool) -> None:
    """Print the log of a target's newest attempt (failed ones too, and one still running).

    The attempt's record (result, host, error) goes to stderr, the log to stdout.
    """
    session = _session(ctx)
    attempts = session.attempts(label)
    if not attempts:
        raise StoreError(
            f"no attempt of {label} is recorded in {session.store.url}",
            hint="'marinbuild history' lists what was built",
        )
    if list_only:
        for index, record in enumerate(attempts, start=1):
            click.echo(f"{index:3}  {records.attempt_line(record)}")
        return
    if not (-len(attempts) <= number <= len(attempts)) or number == 0:
        raise click.BadParameter(
            f"{label} has {len(attempts)} attempts: use 1..{len(attempts)} or -1..-{len(attempts)}",
            param_hint="--attempt",
        )
    index = number - 1 if number > 0 else len(attempts) + number
    record = attempts[index]
    click.echo(records.log_header(record, index + 1, len(attempts)), err=True)
    text = provenance.read_log(session.store, record)
    if text is None:
        click.echo("(no log in the store: it is uploaded when the attempt ends)", err=True)
    else:
        click.echo(text, nl=False)


@cli.command()
@click.argument("patterns", nargs=-1)
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="How many builds to show.")
@click.option("--all", "show_cached", is_flag=True, help="Also list the targets a build found cached.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@click.pass_context
@_handles_errors
def history(ctx: click.Context, patterns: tuple[str, ...], limit: int, show_cached: bool, as_json: bool) -> None:
    """List the newest builds and the attempts they made (who built what, when, and how it
    ended, failures included), for the targets PATTERNS match (default: all)."""
    items = _session(ctx).history(patterns, limit, ran_only=not show_cached)
    if as_json:
        click.echo(json.dumps([item.to_json() for item in items], indent=2))
        return
    for line in records.history_lines(items):
        click.echo(line)


@cli.command(cls=_BuildCommand)
@click.argument("patterns", nargs=-1, required=True)
@click.option(
    "--by",
    metavar="METRIC",
    help="Mark the best run by this metric (e.g. eval.loss, eval_loss): the lowest, or the highest with --max.",
)
@click.option("--max", "maximize", is_flag=True, help="With --by: the best run has the highest value.")
@click.option("--history", is_flag=True, help="Also the earlier outputs of the same targets still in the store.")
@click.option("--curves", is_flag=True, help="Print the loss curves instead of the table (a terminal plot, or --csv).")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@_handles_errors
def compare(
    ctx: click.Context,
    patterns: tuple[str, ...],
    by: str | None,
    maximize: bool,
    history: bool,
    curves: bool,
    as_csv: bool,
    as_json: bool,
) -> None:
    """Compare the training runs among PATTERNS' targets: one row per run, with the
    hyperparameters that differ between them, their final metrics and their evaluations'
    (the targets among PATTERNS that read them). Reads the store; builds nothing."""
    if as_csv and as_json:
        raise click.UsageError("--csv and --json exclude each other")
    comparison = _session(ctx).compare(patterns, by=by, maximize=maximize, history=history)
    for note in comparison.notes if as_csv or as_json else ():
        click.echo(f"marinbuild: note: {note}", err=True)
    if curves:
        if as_csv:
            click.echo(comparison.curves_csv(), nl=False)
        elif as_json:
            click.echo(json.dumps([dataclasses.asdict(curve) for curve in comparison.curves], indent=2))
        else:
            from marinbuild.cli.plot import plot_lines

            click.echo("\n".join(plot_lines(comparison.curves)))
        return
    if as_csv:
        click.echo(comparison.to_csv(), nl=False)
    elif as_json:
        click.echo(json.dumps(comparison.to_json(), indent=2))
    else:
        click.echo("\n".join(records.comparison_lines(comparison)))


@cli.command(cls=_BuildCommand)
@click.argument("patterns", nargs=-1, required=True)
@click.option(
    "--output",
    "-o",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    default="marinbuild-report",
    show_default=True,
    help="Directory to write the report into.",
)
@click.pass_context
@_handles_errors
def report(ctx: click.Context, patterns: tuple[str, ...], out: Path) -> None:
    """Write a static HTML report of PATTERNS' targets: their graph coloured by status, the
    training runs with their metrics and loss curves, scaling-law fits, and every attempt
    with its log, failures included. Open index.html in the output directory; no server or network is needed."""
    from marinbuild.report import write_report  # matplotlib and friends: only for a report

    click.echo(write_report(_session(ctx), patterns, out).resolve())


@cli.command(cls=_BuildCommand)
@click.argument("patterns", nargs=-1)
@click.option(
    "--port",
    type=click.IntRange(min=0, max=65535),
    default=8000,
    show_default=True,
    help="Port on 127.0.0.1 (0: any free one).",
)
@click.option(
    "--refresh",
    "refresh_s",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Seconds between regenerations; pages reload as often.",
)
@click.option(
    "--output",
    "-o",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep the pages in this directory (default: a temporary one).",
)
@click.pass_context
@_handles_errors
def serve(ctx: click.Context, patterns: tuple[str, ...], port: int, refresh_s: int, out: Path | None) -> None:
    """Serve the report of PATTERNS (default: //...) on localhost, regenerated while builds
    run. Ctrl-C stops it."""
    from marinbuild.report.serve import ReportServer

    with tempfile.TemporaryDirectory(prefix="marinbuild-report-") as scratch:
        server = ReportServer(
            ("127.0.0.1", port), lambda: _session(ctx), patterns or ("//...",), out or Path(scratch), refresh_s
        )
        click.echo(f"serving the report of {' '.join(patterns or ('//...',))} at {server.url} (Ctrl-C stops)", err=True)
        click.echo(server.url)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()


@cli.command()
@click.argument("expression", nargs=-1, required=True)
@click.option(
    "--output", type=click.Choice(list(FORMATS)), default="label", show_default=True, help="How to print the result."
)
@click.option("--keep-going", "-k", is_flag=True, help="Skip unknown targets and broken packages, with a warning.")
@click.pass_context
@_handles_errors
def query(ctx: click.Context, expression: tuple[str, ...], output: str, keep_going: bool) -> None:
    """Print the targets an EXPRESSION in Bazel's query language names (see docs/query.md).

    `marinbuild query 'rdeps(//..., //data:corpus)'`; `marinbuild query deps //x:y` is
    short for `deps(//x:y)`.
    """
    result = _session(ctx).query(from_command_line(expression), keep_going)
    for warning in result.warnings:
        click.echo(f"marinbuild: warning: {warning}", err=True)
    if not result.labels and output != "json":
        click.echo("marinbuild: the query matched no targets", err=True)
    click.echo(result.render(output), nl=False)


@cli.group(cls=_SharedOptionsGroup)
def cache() -> None:
    """Look after the store: verify, collect garbage, count."""


@cache.command("verify")
@click.argument("patterns", nargs=-1)
@click.pass_context
@_handles_errors
def cache_verify(ctx: click.Context, patterns: tuple[str, ...]) -> None:
    """Re-hash the outputs of PATTERNS' entries (default: every entry) and report every
    mismatch; an entry with one is quarantined, so the next build rebuilds it."""
    session = _session(ctx)
    keys = sorted(session.pattern_keys(patterns)) if patterns else maintenance.entry_keys(session.store)
    mismatches, kept, verified = maintenance.verify(session.cache, keys)
    for mismatch in mismatches:
        click.echo(f"MISMATCH {mismatch.label} ({mismatch.key[:12]}): {mismatch.problem}")
    click.echo(f"verified {verified} entries of {session.store.url}: {len(mismatches)} mismatches")
    damaged = {mismatch.key for mismatch in mismatches}
    if damaged - kept:
        click.echo(f"quarantined {len(damaged - kept)} entries: the next build rebuilds them")
    if kept:
        click.echo(f"could not quarantine {len(kept)} entries: the store is read-only here", err=True)
    sys.exit(EXIT_FAILED if mismatches else 0)


@cache.command("gc")
@click.option(
    "--dry-run", "-n", is_flag=True, help="Report what would be removed, bytes per experiment; remove nothing."
)
@click.option(
    "--grace",
    default="7d",
    show_default=True,
    metavar="AGE",
    help="Keep what was used more recently than this (e.g. 0s, 30m, 24h, 7d).",
)
@click.pass_context
@_handles_errors
def cache_gc(ctx: click.Context, dry_run: bool, grace: str) -> None:
    """Remove what no target of the workspace, no workspace's newest build, pin, recent
    invocation or held lease uses."""
    session = _session(ctx)
    keep, in_use = session.keys_in_use()
    others = in_use.workspaces - {(socket.gethostname(), os.fspath(session.workspace.root))}
    if others or stores.parse_store_url(session.store_url).local_directory is None:
        click.echo(
            f"WARNING: {session.store.url} is shared ({len(others)} other workspaces have built into it): "
            "gc keeps this workspace's current outputs and what each workspace's newest build of each "
            f"target used ({len(in_use.keys)} keys); an output that no recorded build used (only read, or "
            "built by a reader who may not write) is not protected: pin it (docs/store.md)",
            err=True,
        )
    report = maintenance.collect_garbage(session.cache, keep, _duration_s(grace), dry_run, in_use.superseded)
    for experiment, size in sorted(report.bytes_by_experiment.items()):
        click.echo(f"  {experiment}: {size:,} bytes")
    verb = "would remove" if dry_run else "removed"
    click.echo(
        f"{verb} {len(report.removed)} keys, {sum(report.removed.values()):,} bytes from {session.store.url}"
        f" (kept {report.kept_young} younger than {grace}, {report.kept_held} with a held lease)"
    )
    if report.staging_removed:
        click.echo(
            f"{verb} {len(report.staging_removed)} staging directories left by killed builders, "
            f"{sum(report.staging_removed.values()):,} bytes"
        )
    if report.records_removed:
        click.echo(
            f"{verb} the records of {len(report.records_removed)} builds that found everything cached and that "
            f"newer builds supersede, {sum(report.records_removed.values()):,} bytes ('history' no longer lists them)"
        )


@cache.command("stats")
@click.pass_context
@_handles_errors
def cache_stats(ctx: click.Context) -> None:
    """Count the store's keys, entries, objects and bytes."""
    session = _session(ctx)
    found = maintenance.stats(session.store)
    click.echo(f"{session.store.url}: {found.keys} keys, {found.entries} entries, {found.leases_held} leases held")
    for area in sorted(found.objects_by_area):
        click.echo(f"  {area}/: {found.objects_by_area[area]} objects, {found.bytes_by_area[area]:,} bytes")
    for (origin, destination), (count, size) in sorted(found.copied.items()):
        click.echo(f"  copied from {origin} to {destination}: {count} entries, {size:,} bytes")
    if found.leftovers:
        click.echo(
            f"  {len(found.leftovers)} staging directories left by killed builders, "
            f"{sum(item.bytes for item in found.leftovers):,} bytes ('marinbuild cache gc' removes them)"
        )


_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration_s(text: str) -> float:
    try:
        return float(text[:-1]) * _UNITS_S[text[-1]]
    except (KeyError, ValueError, IndexError):
        raise click.BadParameter(f"'{text}' is not a duration like 0s, 30m, 24h or 7d", param_hint="--grace") from None


def _reporter(live: bool) -> Reporter:
    if not live:
        return PlainReporter()
    from marinbuild.cli.live import LiveReporter  # rich costs 50 ms to import: only when shown

    return LiveReporter()


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM (a job scheduler, `kill`) stops a build as Ctrl-C does: running steps are
    killed and recorded `cancelled`, their leases released, nothing partial published."""
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _terminated)
    try:
        cli(prog_name="marinbuild")
    finally:
        _spare_the_exit()


def _spare_the_exit() -> None:
    """The process is about to end: keep the garbage collector from scanning its whole heap.

    At exit Python collects cycles once more over everything still alive (a build's graph,
    packages and memos), which frees nothing the exit would not free anyway: a tenth of a
    10,000-target no-op went there. Frozen, that heap is skipped; objects are still freed
    and finalised as usual (files flushed and closed, atexit handlers run, threads joined).
    Only the console command does this, never a caller of `cli` in a longer-lived process."""
    gc.disable()
    gc.freeze()
