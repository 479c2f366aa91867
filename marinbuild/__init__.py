"""marinbuild: a content-addressed build system for training foundation models.

The code follows a build from the command line to the store, one subpackage per stage,
as in Bazel:

    labels      names: `//pkg:name` labels and command-line target patterns
    targets     the rules API — attributes, rules, targets, the `ctx` a rule runs with,
                what a rule declares its outputs hold — and the built-in rules
    packages    the workspace and its BUILD.marin files, evaluated (Starlark) into targets
    actions     analysis (the graph, action keys, pins), execution (the scheduler and
                what runs a step) and bookkeeping (results, events, records)
    store       where outputs, create-only action-cache entries, attempts and logs live
    provenance  what the store records, read back (attempts, history, show, compare)
    cluster     running steps on Ray
    query       Bazel's query language over the target graph
    session     one command's workspace, loader, store and cache, and planning
    commands    what each command does, given a session
    cli         the `marinbuild` command and its progress display

Imports only point down the layers; `pyproject.toml` states them as import-linter
contracts, and docs/concepts.md ("Layout") explains them. `api` is the notebook entry
point: `marinbuild.output(label)`, `marinbuild.metrics(label)`, `marinbuild.compare(pattern)`.
"""

from typing import Any

from marinbuild.version import __version__

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    """`marinbuild.output`, `marinbuild.metrics` and `marinbuild.compare`, imported on first
    use: `import marinbuild` stays cheap for the CLI."""
    if name in ("output", "metrics", "compare"):
        from marinbuild import api

        return getattr(api, name)
    raise AttributeError(f"module 'marinbuild' has no attribute {name!r}")
