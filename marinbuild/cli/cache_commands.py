"""`marinbuild cache ...`: look after the store (verify, collect garbage, count)."""

from __future__ import annotations

import os
import socket
import sys

import click

from marinbuild import store as stores
from marinbuild.cli.base import EXIT_FAILED, SharedOptionsGroup, handles_errors, open_session
from marinbuild.commands.cache_keys import keys_in_use, pattern_keys
from marinbuild.store import maintenance


@click.group(cls=SharedOptionsGroup)
def cache() -> None:
    """Look after the store: verify, collect garbage, count."""


@cache.command("verify")
@click.argument("patterns", nargs=-1)
@click.pass_context
@handles_errors
def cache_verify(ctx: click.Context, patterns: tuple[str, ...]) -> None:
    """Re-hash the outputs of PATTERNS' entries (default: every entry) and report every
    mismatch; an entry with one is quarantined, so the next build rebuilds it."""
    session = open_session(ctx)
    keys = sorted(pattern_keys(session, patterns)) if patterns else maintenance.entry_keys(session.store)
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
@handles_errors
def cache_gc(ctx: click.Context, dry_run: bool, grace: str) -> None:
    """Remove what no target of the workspace, no workspace's newest build, pin, recent
    invocation or held lease uses."""
    session = open_session(ctx)
    keep, in_use = keys_in_use(session)
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
@handles_errors
def cache_stats(ctx: click.Context) -> None:
    """Count the store's keys, entries, objects and bytes."""
    session = open_session(ctx)
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
