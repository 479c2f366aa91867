"""Copying entries the store lacks from its mirrors in other regions, within the build's
egress budget (docs/regions.md).

The store's mirrors (store/mirrors.py) find and copy one entry; only a build knows which
copies it makes in all, so the budget is enforced here: the first time, against every
copy the build can foresee, then against each round of copies.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from marinbuild.actions.bookkeeping.results import Reporter, Status, TargetResult
from marinbuild.actions.execution.build_options import BuildOptions, Egress
from marinbuild.actions.execution.build_state import BuildState
from marinbuild.errors import EgressOverBudget
from marinbuild.store import ActionCache, Outputs, reporting_transfers
from marinbuild.store.entries import Lookup
from marinbuild.store.mirrors import MirrorHit, format_bytes

# Entries copied from mirrors at once (each a lease and a few requests around GCS's rewrites).
_PARALLEL_COPIES = 8


class MirrorCopies:
    """What one build found in mirrors and copies, resolved into `state` through `resolve`.
    `foresee` runs the build dry and gives every mirror hit it would copy."""

    def __init__(
        self,
        state: BuildState,
        cache: ActionCache,
        options: BuildOptions,
        reporter: Reporter,
        resolve: Callable[[str, Outputs], None],
        foresee: Callable[[], dict[str, MirrorHit]],
    ):
        self.graph = state.graph
        self.cache = cache
        self.options = options
        self.reporter = reporter
        self._record = state.record
        self._resolve = resolve
        self._foresee = foresee
        self._copies: list[tuple[str, MirrorHit]] = []  # found in mirrors, not yet copied
        self.foreseen: dict[str, MirrorHit] = {}  # every target found in a mirror (a dry run's are foreseen)
        self._looked_ahead = False  # whether the copies this build can foresee were checked
        self._egress_bytes = 0  # copied across regions so far

    @property
    def pending(self) -> bool:
        """Whether targets found in mirrors wait to be copied."""
        return bool(self._copies)

    def find(self, action_keys: list[str], lookups: list[Lookup]) -> dict[str, MirrorHit]:
        """The keys the store lacks (no entry at all) that a mirror holds, verified there;
        a build only, and only after the local look-ups, so a no-op asks no mirror."""
        mirrors = self.cache.mirrors
        if self.options.egress is None or mirrors is None:
            return {}
        missing = [
            key for key, lookup in zip(action_keys, lookups) if lookup.outputs is None and lookup.problem is None
        ]
        if not missing:
            return {}
        hits, problems = mirrors.find(missing)
        for problem in problems:
            self.reporter.warning(f"{problem}; not copied: it is built here")
        return hits

    def found(self, label: str, key: str, mirrored: MirrorHit) -> None:
        """A target a mirror holds: copied (`copy_pending`) before any step that follows
        runs; a dry run resolves it at once, as what a build would copy."""
        mirrors = self.cache.mirrors
        assert mirrors is not None
        self.foreseen[label] = mirrored
        if not self.options.dry_run:
            self._copies.append((label, mirrored))  # resolved once copied
            return
        reason = f"in {mirrored.describe()}: a build copies it"
        self._record(TargetResult(label, Status.WOULD_COPY, key, reason=reason))
        self._resolve(label, mirrors.outputs(mirrored))

    def copy_pending(self) -> None:
        """Copy what the last round of planning found in mirrors, then resolve it, before
        any step that may read it starts. The first time, every copy the build can foresee
        (a dry run of the graph, mirror hits resolved in memory: what lies downstream of
        them) is checked against the egress budget at once, so a build past it copies
        nothing; each round is checked again, for copies found downstream of steps that ran.
        Past the budget the build stops (exit 2) listing the copies, unless egress is allowed."""
        pending, self._copies = self._copies, []
        egress, mirrors = self.options.egress, self.cache.mirrors
        assert egress is not None and mirrors is not None
        budget = egress.budget_gb * 1e9
        if not egress.allowed and not self._looked_ahead:
            self._looked_ahead = True
            ahead = self._foresee()
            foreseen = sum(hit.bytes for hit in ahead.values() if hit.crosses_regions)
            if foreseen > budget:
                raise self._over_budget(list(ahead.items()), foreseen, egress)
        crossing = sum(hit.bytes for _label, hit in pending if hit.crosses_regions)
        if crossing and not egress.allowed and self._egress_bytes + crossing > budget:
            raise self._over_budget(pending, crossing, egress)

        def copy(label: str, hit: MirrorHit) -> Outputs:
            with reporting_transfers(functools.partial(self.reporter.step_progress, label)):
                return mirrors.copy(hit)

        with ThreadPoolExecutor(max_workers=min(len(pending), _PARALLEL_COPIES), thread_name_prefix="copy") as pool:
            copied = list(pool.map(lambda item: copy(*item), pending))
        for (label, hit), outputs in zip(pending, copied):
            self._egress_bytes += hit.bytes if hit.crosses_regions else 0
            reason = f"copied from {hit.describe()}"
            self._record(TargetResult(label, Status.CACHED, hit.key, outputs.directory, reason=reason))
            self._resolve(label, outputs)

    def _over_budget(self, found: list[tuple[str, MirrorHit]], crossing: int, egress: Egress) -> EgressOverBudget:
        """The error that stops a build past its egress budget: every copy across regions
        it would make, with its size, at the BUILD line of the first."""
        crossing_hits = [(label, hit) for label, hit in found if hit.crosses_regions]
        lines = [f"{label} ({hit.key[:12]}): {hit.describe()}" for label, hit in crossing_hits[:20]]
        if len(crossing_hits) > 20:
            lines.append(f"... and {len(crossing_hits) - 20} more")
        already = f", after {format_bytes(self._egress_bytes)} copied" if self._egress_bytes else ""
        entries = sum(hit.entries for _label, hit in crossing_hits)  # kept states are copied with their keeper
        return EgressOverBudget(
            f"copying {entries} entries from other regions would move {format_bytes(crossing)}{already}, "
            f"over this build's egress budget of {format_bytes(egress.budget_gb * 1e9)}; none of them was copied:\n    "
            + "\n    ".join(lines),
            location=self.graph.targets[crossing_hits[0][0]].location,
            hint=f"pass --allow-egress to copy them anyway, or raise {egress.setting}",
        )
