"""Actions: from targets to run steps, in three phases, a folder each.

analysis     what a build is, decided before anything runs: the checked graph, action
             keys, and the pins of external artifacts
execution    running it: the scheduler and its parts, one attempt of a step, executors,
             the sandbox, sharded steps, kept checkpoints
bookkeeping  what a build reports and records: results, the event stream, who ran it
             where, and the no-op certificate

Execution uses the other two; analysis and bookkeeping import neither execution nor each
other (pyproject.toml's import-linter contracts).
"""
