"""Planning: each ready target's key and recipe, looked up in the cache.

A target's key can only be computed once its dependencies' output digests are known
(early cutoff), so keys are computed as dependencies resolve: a hit resolves the target
at once (one found in a mirror once copied, an external artifact once its pins are
checked), a miss is handed to the scheduler to run, or shown when the build is dry.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from marinbuild.actions.analysis import keys
from marinbuild.actions.bookkeeping.results import Status, TargetResult
from marinbuild.actions.execution.build_options import BuildOptions, Hooks
from marinbuild.actions.execution.build_state import BuildState, Planned
from marinbuild.actions.execution.checkpoint_reads import CheckpointReads
from marinbuild.actions.execution.kept_states import kept_keys
from marinbuild.actions.execution.mirror_copies import MirrorCopies
from marinbuild.errors import GraphError, StoreReadOnly
from marinbuild.store import ActionCache, Outputs
from marinbuild.store.entries import Lookup
from marinbuild.store.mirrors import MirrorHit
from marinbuild.targets.rule import Target


class Planner:
    """Plans the targets `state` has ready, resolving hits through `resolve` (the
    scheduler's); misses find their published kept states in `checkpoints`, hits the
    store lacks are looked up in, and copied by, `mirror_copies`."""

    def __init__(
        self,
        state: BuildState,
        cache: ActionCache,
        salt: str,
        options: BuildOptions,
        hooks: Hooks,
        resolve: Callable[[str, Outputs], None],
        checkpoints: CheckpointReads,
        mirror_copies: MirrorCopies,
    ):
        self.graph = state.graph
        self.cache = cache
        self.salt = salt
        self.options = options
        self.hooks = hooks
        self.reporter = state.reporter
        self._tokens = state.tokens
        self._keys = state.keys
        self._ready = state.ready
        self._record = state.record
        self._downstream = state.downstream
        self._kept = state.kept
        self._code_digest = functools.partial(state.code_digest, stat_cache=cache.stat_cache)
        self._resolve = resolve
        self._checkpoints = checkpoints
        self._mirror_copies = mirror_copies
        # Set when the store refuses writes: cached targets are served, a step to run is an error.
        self.read_only: StoreReadOnly | None = None

    def hash_sources(self) -> None:
        for label, source in self.graph.sources.items():
            digest, _size = self.cache.stat_cache.digest(source.path)
            self._tokens[label] = keys.source_token(source.label.name, digest)

    def foreseen_keys(self) -> list[str]:
        """The keys this build will look up, as far as the store's listing foretells them.

        A target's key is known once its inputs' outputs are, which a look-up tells level
        by level of the graph; the listing shows beside each entry the tree digest of its
        outputs (`ActionCache.listed_tree`), from which its dependents' keys follow before
        it is read. With a key come those of the states its step keeps (their entries are
        part of its look-up), and what reads one of them follows from that state's digest.
        Pinned targets are not foreseen, nor what reads them. A wrong digest only foresees
        a key that is not looked up: every key looked up is made of what verified entries
        say."""
        tokens = dict(self._tokens)
        foreseen = []
        for label in self.graph.order:
            target = self.graph.targets[label]
            if target.rule.pinned or not all(dep in tokens for dep in self.graph.inputs(label)):
                continue
            key = keys.target_key(*self._key_ingredients(label, tokens))
            steps = target.attrs[target.rule.keeps_checkpoints] if target.rule.keeps_checkpoints else []
            foreseen += [key, *kept_keys(key, steps).values()]
            states = {
                name: keys.checkpoint_key(key, self.graph.checkpoints[name].step) for name in self._kept.get(label, ())
            }
            for name, named in {label: key, **states}.items():
                tree = self.cache.listed_tree(named)
                if tree is not None:
                    tokens[name] = keys.output_token(tree)
        return foreseen

    def _external(self, label: str) -> str | None:
        target = self.graph.targets[label]
        if target.rule.external_inputs is None:
            return None
        files = target.rule.external_inputs(target.attrs)
        return keys.external_digest(files, lambda path: self.cache.stat_cache.digest(path)[0])

    def plan_ready(self) -> list[Planned]:
        """Plan every ready target, looking their keys up together (in parallel on a remote store)."""
        ready = list(self._ready)
        self._ready.clear()  # a pinned target resolved here makes its dependents ready: next round
        labels = [label for label in ready if not self._resolved_pinned(label)]
        action_keys = [keys.target_key(*self._key_ingredients(label)) for label in labels]
        lookups = self.cache.lookup_many(action_keys)
        in_mirrors = self._mirror_copies.find(action_keys, lookups)
        planned = (
            self._plan(label, key, lookup, in_mirrors.get(key))
            for label, key, lookup in zip(labels, action_keys, lookups)
        )
        return [item for item in planned if item is not None]

    def _key_ingredients(
        self, label: str, tokens: dict[str, str] | None = None
    ) -> tuple[Target, Callable[[str], str], str, str | None, str | None]:
        """What a target's key and recipe are made of, once its inputs are known (their
        tokens: the build's, or foreseen ones)."""
        target = self.graph.targets[label]
        code = self._code_digest(target.rule) if self.options.strict_code else None
        return target, (self._tokens if tokens is None else tokens).__getitem__, self.salt, self._external(label), code

    def recipe(self, label: str) -> dict[str, Any] | None:
        """The recipe of a target whose key this build knows (None for the others). Made
        again when asked: a build needs recipes only for the steps it runs, and `explain`."""
        return self.recipe_of(label) if label in self._keys else None

    def recipe_of(self, label: str) -> dict[str, Any]:
        """The recipe of a target whose inputs are known."""
        return keys.recipe(*self._key_ingredients(label))

    def _plan(self, label: str, key: str, lookup: Lookup, mirrored: MirrorHit | None = None) -> Planned | None:
        """Resolve a hit at once (one in a mirror is copied before any step that follows
        runs); return a miss to be run (or shown, when dry)."""
        target = self.graph.targets[label]
        self._keys[label] = key
        if mirrored is not None and self.cache.mirrors is not None:
            self._mirror_copies.found(label, key, mirrored)
            return None
        if lookup.outputs is not None:
            built_with = lookup.outputs.rule_code
            code_changed = built_with is not None and built_with != self._code_digest(target.rule)
            self._record(TargetResult(label, Status.CACHED, key, lookup.outputs.directory, code_changed=code_changed))
            self._resolve(label, lookup.outputs)
            return None
        if lookup.problem is not None:
            self.reporter.warning(f"{label}: {lookup.problem}; rebuilding it")
        self._checkpoints.resolve_published(label)
        explain = self.hooks.explain_miss if self.options.explain else None
        recipe = self.recipe_of(label)
        reason = lookup.problem or (explain(target, recipe) if explain else "no cached output for its key")
        if self.read_only is not None and not self.options.dry_run:
            raise StoreReadOnly(
                f"{label} must run ({reason}), but {self.read_only.message}: nothing could be published",
                hint=self.read_only.hint,
            )
        if self.options.dry_run:
            self._record(TargetResult(label, Status.WOULD_RUN, key, reason=reason))
            for dependent in self._downstream(label):
                self._record(TargetResult(dependent, Status.PENDING, reason=f"its key needs the output of {label}"))
            return None
        return Planned(target, key, recipe, reason if self.options.explain else None)

    def _resolved_pinned(self, label: str) -> bool:
        """Resolve an external artifact at once (it is pinned, never built); False for others."""
        target = self.graph.targets[label]
        if not target.rule.pinned:
            return False
        if self.hooks.resolve_pinned is None:
            raise GraphError(f"{label} is an external artifact, which this command cannot resolve")
        outputs = self.hooks.resolve_pinned(target)
        self._record(TargetResult(label, Status.PINNED, outputs.key, outputs.directory))
        self._resolve(label, outputs)
        return True
