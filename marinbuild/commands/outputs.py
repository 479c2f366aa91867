"""Where a built target's output is, verified: `where` (a directory here; a URL for an
output only in a mirror in another region; a kept checkpoint's own entry with `--step`),
`marinbuild.output()` and `marinbuild.metrics()`, and the key that names an output (a key,
a prefix of one, or a label) for `show`.
"""

from __future__ import annotations

from pathlib import Path

from marinbuild import provenance
from marinbuild import store as stores
from marinbuild.actions.analysis.graph import Graph
from marinbuild.actions.analysis.keys import checkpoint_key
from marinbuild.actions.bookkeeping.results import Status, TargetResult
from marinbuild.errors import GraphError, StoreError
from marinbuild.provenance.metrics import stored_metrics
from marinbuild.provenance.rerun import find_key
from marinbuild.session import Session
from marinbuild.store import Outputs
from marinbuild.store.mirrors import MirrorHit
from marinbuild.targets.rule import Target, checkpoint_dir, checkpoint_name


def where(session: Session, pattern: str) -> Path:
    """The output directory of a built target whose recipe is current."""
    return session.cache.local_dir(current_output(session, pattern)[1])


def location(session: Session, pattern: str, step: int | None = None) -> tuple[str, str | None]:
    """Where the output of a built target is (`marinbuild where`): its directory here;
    for one built only in a mirror, its URL there (nothing is read or copied) and a
    note saying where that is and what a build here would copy. With `step`, the same
    for the state it kept at that step, which is an entry of its own (and which the
    note names for a target that keeps states, asked without a step)."""
    graph, result = _current(session, pattern)
    target, hit = graph.targets[result.label], _mirror_only(session, result)
    kept = (target.attrs[target.rule.keeps_checkpoints] or []) if target.rule.keeps_checkpoints else []
    if step is not None:
        return _kept_location(session, graph, result, hit, kept, step)
    if hit is not None:
        return hit.output_url, f"{result.label} is {hit.elsewhere()}"
    note = None
    if kept:
        steps = ", ".join(str(at) for at in kept)
        note = (
            f"{result.label} keeps checkpoints at steps {steps}, each an entry of its own, not in this "
            f"directory: 'marinbuild where --step {kept[0]} {result.label}'"
        )
    return str(session.cache.local_dir(_verified_outputs(session, graph, result)[1])), note


def _kept_location(
    session: Session, graph: Graph, result: TargetResult, hit: MirrorHit | None, kept: list[int], step: int
) -> tuple[str, str | None]:
    """Where the state a built target kept at `step` is (`where --step`): its entry's
    output; for an entry made before kept states left the output, in that output."""
    target = graph.targets[result.label]
    if step not in kept:
        raise GraphError(
            f"{result.label} keeps no checkpoint at step {step} (it keeps: {', '.join(map(str, kept)) or 'none'})",
            location=target.location,
        )
    name = checkpoint_name(result.label, step)
    keeper = _verified_outputs(session, graph, result)[1] if hit is None else None  # built, as it is now
    assert result.key is not None  # built, or in a mirror
    key = checkpoint_key(result.key, step)
    state = hit.kept_state(key) if hit is not None else None
    if state is not None:
        return state.output_url, f"{name} is {state.elsewhere()}"
    cache = session.cache
    outputs = cache.lookup(key).outputs
    if outputs is not None:
        return str(cache.local_dir(outputs)), None
    if keeper is not None and any(item.path.startswith(checkpoint_dir(step) + "/") for item in keeper.manifest.files):
        return str(cache.local_dir(keeper) / checkpoint_dir(step)), None
    raise StoreError(
        f"{name} has no usable entry in the store {session.store.url}",
        hint=f"'marinbuild build {result.label}' builds it again",
    )


def current_output(session: Session, pattern: str) -> tuple[Target, Outputs]:
    """A target and its verified outputs, for its current recipe."""
    return _verified_outputs(session, *_current(session, pattern))


def metrics(session: Session, pattern: str) -> dict:
    """The summary metrics of a built ML step (its rule's `metrics_file`); {} for other steps."""
    target, outputs = current_output(session, pattern)
    entry = session.cache.read_entry(outputs.key)
    if isinstance(entry, str):
        raise StoreError(entry)
    return stored_metrics(session.cache, entry, target.rule)


def resolve_output(session: Session, text: str) -> tuple[str, str | None]:
    """The key of an output named by a key (or a unique prefix of one) or by a label, and a
    note when a label's current recipe is not built and its newest output is used instead."""
    if ":" not in text and "/" not in text:
        return find_key(session.cache, text), None
    _graph, result = _current(session, text)
    label = result.label
    if result.status in (Status.CACHED, Status.WOULD_COPY) and result.key is not None:
        return result.key, None  # built here, or only in a mirror (`describe` says which)
    for record in reversed(provenance.label_attempts(session.store, label)):
        if record.status is stores.AttemptStatus.SUCCEEDED and session.cache.lookup(record.key).outputs is not None:
            return (
                record.key,
                f"{label} is not built for its current recipe ({result.reason}); this is its newest output",
            )
    raise GraphError(
        f"{label} has no output in {session.store.url} ({result.reason})", hint=f"run 'marinbuild build {label}'"
    )


def _current(session: Session, pattern: str) -> tuple[Graph, TargetResult]:
    """The graph of one target, and what a build would do with it."""
    graph = session.plan([pattern])
    if len(graph.requested) != 1:
        raise GraphError(f"'{pattern}' names {len(graph.requested)} targets; give one label")
    return graph, session.dry_run_graph(graph).results[graph.requested[0]]


def _verified_outputs(session: Session, graph: Graph, result: TargetResult) -> tuple[Target, Outputs]:
    label = result.label
    hit = _mirror_only(session, result)
    if hit is not None:
        raise GraphError(f"{label} is {hit.elsewhere()}", hint=f"'marinbuild build {label}' copies it here")
    if result.status is not Status.CACHED:
        raise GraphError(f"{label} is not built ({result.reason})", hint=f"run 'marinbuild build {label}'")
    outputs = session.cache.lookup(result.key).outputs if result.key is not None else None
    if outputs is None:
        raise StoreError(f"{label} vanished from the store {session.store.url} while being looked up")
    return graph.targets[label], outputs


def _mirror_only(session: Session, result: TargetResult) -> MirrorHit | None:
    """The mirror's entry of a target a build would copy: verified by the dry run, which
    found it (asking again costs no request)."""
    mirrors = session.cache.mirrors
    if result.status is not Status.WOULD_COPY or result.key is None or mirrors is None:
        return None
    return mirrors.hit(result.key)
