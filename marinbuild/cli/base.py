"""What every command shares: the one place errors are caught and printed, the options
each command takes (--workspace, --store, --unsafe-no-locking), opening the session, and
the argument parsing of commands that take target patterns.

Exit status: 0 success, 1 a step failed, 2 bad input or usage, 130 interrupted.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from marinbuild.actions.bookkeeping.results import Reporter
from marinbuild.cli.progress import PlainReporter
from marinbuild.errors import MarinbuildError
from marinbuild.session import Session

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def _fail(error: MarinbuildError) -> None:
    lines = [f"marinbuild: error: {error}"]
    if error.hint:
        lines.append(f"  hint: {error.hint}")
    click.echo("\n".join(lines), err=True)
    sys.exit(EXIT_BAD_INPUT)


def handles_errors(command: Callable[..., Any]) -> Callable[..., Any]:
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


def shared_options() -> list[click.Parameter]:
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


class SharedOptionsGroup(click.Group):
    """A group each of whose commands takes the shared options too, as users type them after
    the command (`marinbuild build //x --store DIR`, as with Bazel), not only before it.

    Nested groups are of this class too (`marinbuild cache gc --store DIR`), and a command
    added later takes them without declaring anything.
    """

    def __init__(self, *args: Any, lazy_commands: dict[str, str] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # name -> "module:attribute", imported when the command is asked for: a no-op build
        # then loads neither the query language nor the report's pages (docs/benchmarks.md).
        self.lazy_commands = dict(lazy_commands or {})

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        cmd.params.extend(shared_options())
        super().add_command(cmd, name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            module, _, attribute = self.lazy_commands[cmd_name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return self.commands.get(cmd_name)


class DefaultToBuild(SharedOptionsGroup):
    """`marinbuild //x:all` is `marinbuild build //x:all`."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        if args and args[0] not in self.list_commands(ctx) and not args[0].startswith("--"):
            args = ["build", *args]
        return super().resolve_command(ctx, args)


def open_session(ctx: click.Context) -> Session:
    settings = ctx.ensure_object(dict)
    return Session.open(
        settings.get("workspace"), settings.get("store_url"), unsafe_no_locking=settings.get("unsafe_no_locking", False)
    )


class PatternsCommand(click.Command):
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


def make_reporter(live: bool) -> Reporter:
    if not live:
        return PlainReporter()
    from marinbuild.cli.live import LiveReporter  # rich costs 50 ms to import: only when shown

    return LiveReporter()
