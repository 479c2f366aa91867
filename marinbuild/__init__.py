"""marinbuild: a content-addressed build system for training foundation models.

The package is layered like Bazel, each layer a subpackage that only uses the ones
before it:

    labels   -> names of targets and command-line patterns
    packages -> the workspace and its BUILD.marin files, evaluated as Starlark
    targets  -> the rules API, built-in rules, and the targets a package declares
    actions  -> the graph, action keys, and the scheduler that runs stale steps
    store    -> where outputs, action-cache entries, attempts and logs live
    cli      -> the `marinbuild` command
"""

__version__ = "0.1.0"
