"""The commands that read what was built, and never build: `where`, `show`, `explain`,
`log`, `history`, `query`."""

from __future__ import annotations

import json

import click

from marinbuild import provenance
from marinbuild.cli import records
from marinbuild.cli.base import handles_errors, open_session
from marinbuild.commands import inspect, outputs
from marinbuild.commands.query import query as run_query
from marinbuild.errors import StoreError
from marinbuild.query import FORMATS, from_command_line


@click.command()
@click.argument("label")
@click.option(
    "--step", type=int, default=None, help="The directory of the checkpoint LABEL kept at this step (keep_checkpoints)."
)
@click.pass_context
@handles_errors
def where(ctx: click.Context, label: str, step: int | None) -> None:
    """Print the output directory of a built target (for one built only in a mirror in
    another region: its URL there, and a note on stderr saying so); with --step, that of
    the checkpoint it kept at that step, an entry of its own."""
    location, note = outputs.location(open_session(ctx), label, step)
    if note:
        click.echo(f"marinbuild: note: {note}", err=True)
    click.echo(location)


@click.command()
@click.argument("target")
@click.option("--recursive", "-r", is_flag=True, help="Also show what made each input, down to the sources.")
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
@click.pass_context
@handles_errors
def show(ctx: click.Context, target: str, recursive: bool, as_json: bool) -> None:
    """Show what made an output, named by its LABEL or its KEY (or a prefix of it): the
    recipe with its inputs' digests, who built it where and when with which versions, its
    files, and the metrics of an ML step."""
    description, note = inspect.show(open_session(ctx), target, recursive)
    if note:
        click.echo(f"marinbuild: note: {note}", err=True)
    if as_json:
        click.echo(json.dumps(description, indent=2))
        return
    for line in records.show_lines(description):
        click.echo(line)


@click.command("explain")
@click.argument("label")
@click.option("--strict-code", is_flag=True, help="As a build with --strict-code would key it.")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
@click.pass_context
@handles_errors
def explain_command(ctx: click.Context, label: str, strict_code: bool, as_json: bool) -> None:
    """Say whether LABEL would run and why: each ingredient of its key, and for a miss what
    changed since its nearest earlier output (field by field)."""
    explanation = inspect.explain(open_session(ctx), label, strict_code)
    if as_json:
        click.echo(json.dumps(explanation.to_json(), indent=2))
        return
    for line in records.explanation_lines(explanation):
        click.echo(line)


@click.command()
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
@handles_errors
def log(ctx: click.Context, label: str, number: int, list_only: bool) -> None:
    """Print the log of a target's newest attempt (failed ones too, and one still running).

    The attempt's record (result, host, error) goes to stderr, the log to stdout.
    """
    session = open_session(ctx)
    attempts = inspect.attempts(session, label)
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


@click.command()
@click.argument("patterns", nargs=-1)
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="How many builds to show.")
@click.option("--all", "show_cached", is_flag=True, help="Also list the targets a build found cached.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@click.pass_context
@handles_errors
def history(ctx: click.Context, patterns: tuple[str, ...], limit: int, show_cached: bool, as_json: bool) -> None:
    """List the newest builds and the attempts they made (who built what, when, and how it
    ended, failures included), for the targets PATTERNS match (default: all)."""
    items = inspect.history(open_session(ctx), patterns, limit, ran_only=not show_cached)
    if as_json:
        click.echo(json.dumps([item.to_json() for item in items], indent=2))
        return
    for line in records.history_lines(items):
        click.echo(line)


@click.command()
@click.argument("expression", nargs=-1, required=True)
@click.option(
    "--output", type=click.Choice(list(FORMATS)), default="label", show_default=True, help="How to print the result."
)
@click.option("--keep-going", "-k", is_flag=True, help="Skip unknown targets and broken packages, with a warning.")
@click.pass_context
@handles_errors
def query(ctx: click.Context, expression: tuple[str, ...], output: str, keep_going: bool) -> None:
    """Print the targets an EXPRESSION in Bazel's query language names (see docs/query.md).

    `marinbuild query 'rdeps(//..., //data:corpus)'`; `marinbuild query deps //x:y` is
    short for `deps(//x:y)`.
    """
    result = run_query(open_session(ctx), from_command_line(expression), keep_going)
    for warning in result.warnings:
        click.echo(f"marinbuild: warning: {warning}", err=True)
    if not result.labels and output != "json":
        click.echo("marinbuild: the query matched no targets", err=True)
    click.echo(result.render(output), nl=False)
