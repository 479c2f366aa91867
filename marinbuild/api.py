"""The Python API for notebooks and scripts: `marinbuild.output(label)`, `marinbuild.metrics(label)`,
`marinbuild.compare(pattern, ...)`.

Both answer for the target's current recipe, from the store, verified, and build nothing
unless asked (`build=True`): reading results must never start a training run by accident.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from marinbuild.actions.bookkeeping.results import NullReporter
from marinbuild.actions.execution.build_options import BuildOptions
from marinbuild.commands import compare as comparing
from marinbuild.commands import outputs
from marinbuild.commands.build import build as build_targets
from marinbuild.errors import StoreError
from marinbuild.provenance.compare import Comparison
from marinbuild.session import Session


def _session(label: str, workspace: str | Path | None, store: str | None, build: bool) -> Session:
    session = Session.open(Path(workspace) if workspace is not None else None, store)
    if build:
        options = BuildOptions(jobs=session.workspace.jobs or os.cpu_count() or 1)
        result = build_targets(session, [label], options, NullReporter())
        if not result.ok:
            failed = [item for item in result.results.values() if item.status.value == "failed"]
            reason = "; ".join(f"{item.label}: {item.reason}" for item in failed) or "a step failed"
            raise StoreError(
                f"building {label} failed: {reason}", hint=f"'marinbuild log {failed[0].label if failed else label}'"
            )
    return session


def output(label: str, *, workspace: str | Path | None = None, store: str | None = None, build: bool = False) -> Path:
    """The output directory of `label` (a local path; copied from a remote store, verified)."""
    return outputs.where(_session(label, workspace, store, build), label)


def metrics(
    label: str, *, workspace: str | Path | None = None, store: str | None = None, build: bool = False
) -> dict[str, Any]:
    """The summary metrics of a step, as its rule declares them (`Rule.metrics_file`); {} if none."""
    return outputs.metrics(_session(label, workspace, store, build), label)


def compare(
    *patterns: str,
    by: str | None = None,
    maximize: bool = False,
    history: bool = False,
    workspace: str | Path | None = None,
    store: str | None = None,
) -> Comparison:
    """The training runs the patterns name, side by side: a `Comparison` with one row per
    run (the hyperparameters that differ, the attributes that differ anywhere upstream of
    the runs, `datamix:docs_scored.threshold`, final metrics, its evaluations' metrics named
    by what they evaluated, `eval.tokens.loss`, the best run by the column `by`: lowest, or
    highest with `maximize`), `to_pandas()`, `to_csv()`, and the loss curves (`curves`,
    `curves_csv()`). `history`: earlier outputs of the same labels too. Builds nothing."""
    session = Session.open(Path(workspace) if workspace is not None else None, store)
    return comparing.compare(session, patterns, by=by, maximize=maximize, history=history)
