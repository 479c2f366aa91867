"""marinbuild: a content-addressed build system for training foundation models.

The code follows a build from the command line to the store, one subpackage per stage,
as in Bazel:

    labels   names: `//pkg:name` labels and command-line target patterns
    targets  the rules API — attributes, rules, targets, the `ctx` a rule runs with — and
             the built-in rules (genrule, filegroup, py_step)
    packages the workspace and its BUILD.marin files, evaluated (Starlark) into targets
    actions  the graph of a build, action keys, and the scheduler that runs stale steps
    store    where outputs, create-only action-cache entries, attempts and logs live
    query    Bazel's query language over the target graph, and functions that ask
             the store what a build would do
    cli      the `marinbuild` command and its progress display

Imports only point down the layers; `pyproject.toml` states them as import-linter
contracts, and docs/concepts.md ("Layers of the code") explains them. `session` wires
the stages together for one command; `provenance` reads back what the store records
(attempts, history, recipes); `cluster` runs steps on Ray; `api` is the notebook entry
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
