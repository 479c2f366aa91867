"""The `marinbuild` command: its group, the commands it holds (one module per group of
commands: build_commands, read_commands, report_commands, cache_commands), and the process's
start and end. Errors are caught and printed in one place, `base.handles_errors`.
"""

from __future__ import annotations

import gc
import signal

import click

import marinbuild
from marinbuild.cli.base import DefaultToBuild, shared_options

# Each command's module is imported when the command is asked for (SharedOptionsGroup).
COMMANDS = {
    "build": "marinbuild.cli.build_commands:build",
    "pin": "marinbuild.cli.build_commands:pin",
    "rerun": "marinbuild.cli.build_commands:rerun",
    "where": "marinbuild.cli.read_commands:where",
    "show": "marinbuild.cli.read_commands:show",
    "explain": "marinbuild.cli.read_commands:explain_command",
    "log": "marinbuild.cli.read_commands:log",
    "history": "marinbuild.cli.read_commands:history",
    "query": "marinbuild.cli.read_commands:query",
    "compare": "marinbuild.cli.report_commands:compare",
    "report": "marinbuild.cli.report_commands:report",
    "serve": "marinbuild.cli.report_commands:serve",
    "cache": "marinbuild.cli.cache_commands:cache",
}


@click.group(
    cls=DefaultToBuild,
    lazy_commands=COMMANDS,
    params=shared_options(),
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(marinbuild.__version__, prog_name="marinbuild")
def cli() -> None:
    """A content-addressed build system for training foundation models.

    --workspace, --store and --unsafe-no-locking go before the command or after it
    (`marinbuild build //x:all --store DIR`); given in both places, the one after the
    command wins.
    """


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
