"""The commands that put results side by side: `compare`, and the report, written (`report`)
or served while builds run (`serve`)."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import click

from marinbuild.cli import records
from marinbuild.cli.base import PatternsCommand, handles_errors, open_session
from marinbuild.commands.compare import compare as compare_runs


@click.command(cls=PatternsCommand)
@click.argument("patterns", nargs=-1, required=True)
@click.option(
    "--by",
    metavar="METRIC",
    help="Mark the best run by this column and sort by it (a metric, eval.tokens.loss, eval_loss, or an attribute "
    "that differs, threshold): the lowest, or the highest with --max.",
)
@click.option("--max", "maximize", is_flag=True, help="With --by: the best run has the highest value.")
@click.option("--history", is_flag=True, help="Also the earlier outputs of the same targets still in the store.")
@click.option("--curves", is_flag=True, help="Print the loss curves instead of the table (a terminal plot, or --csv).")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handles_errors
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
    hyperparameters that differ between them and the attributes that differ anywhere
    upstream of them (their data, and what made it), their final metrics and their
    evaluations' (the targets among PATTERNS that read them). Reads the store; builds nothing."""
    if as_csv and as_json:
        raise click.UsageError("--csv and --json exclude each other")
    comparison = compare_runs(open_session(ctx), patterns, by=by, maximize=maximize, history=history)
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


@click.command(cls=PatternsCommand)
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
@handles_errors
def report(ctx: click.Context, patterns: tuple[str, ...], out: Path) -> None:
    """Write a static HTML report of PATTERNS' targets: their graph coloured by status, the
    training runs with their metrics and loss curves, scaling-law fits, and every attempt
    with its log, failures included. Open index.html in the output directory; no server or network is needed."""
    from marinbuild.report import write_report  # matplotlib and friends: only for a report

    click.echo(write_report(open_session(ctx), patterns, out).resolve())


@click.command(cls=PatternsCommand)
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
@handles_errors
def serve(ctx: click.Context, patterns: tuple[str, ...], port: int, refresh_s: int, out: Path | None) -> None:
    """Serve the report of PATTERNS (default: //...) on localhost, regenerated while builds
    run. Ctrl-C stops it."""
    from marinbuild.report.serve import ReportServer

    with tempfile.TemporaryDirectory(prefix="marinbuild-report-") as scratch:
        server = ReportServer(
            ("127.0.0.1", port), lambda: open_session(ctx), patterns or ("//...",), out or Path(scratch), refresh_s
        )
        click.echo(f"serving the report of {' '.join(patterns or ('//...',))} at {server.url} (Ctrl-C stops)", err=True)
        click.echo(server.url)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
