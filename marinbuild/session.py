"""A session opens what every command works on, once per command: the workspace, its
package loader, the store (with its mirrors in other regions) and its action cache, the
pins of external artifacts; and it plans: patterns to a checked graph, and what a build of
that graph would do (a dry run, which reads the store and writes nothing).

What each command does with them lives in marinbuild/commands/, a module per group of
commands; the CLI and `marinbuild.api` call those with a session.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from marinbuild import provenance
from marinbuild import store as stores
from marinbuild.actions.analysis.graph import Graph, build_graph, expand_patterns
from marinbuild.actions.analysis.pins import Pins
from marinbuild.actions.bookkeeping.results import BuildResult, NullReporter, Reporter
from marinbuild.actions.execution.build_options import BuildOptions, Egress, Hooks
from marinbuild.actions.execution.executor import Executor
from marinbuild.actions.execution.scheduler import Scheduler
from marinbuild.errors import GraphError
from marinbuild.hashing import StatCache
from marinbuild.labels import parse_pattern
from marinbuild.memo import Memo
from marinbuild.packages import PackageLoader, Workspace, open_workspace
from marinbuild.packages.package_cache import PackageCache, rules_fingerprint
from marinbuild.packages.rule_modules import loading_code, workspace_rules
from marinbuild.provenance.explain import explain_miss
from marinbuild.provenance.log_tail import HolderLogTail
from marinbuild.store import ActionCache
from marinbuild.store.entries import ENTRY_FORMAT
from marinbuild.store.mirrors import REGION_ENV, BucketRegions, Mirrors, arrange

if TYPE_CHECKING:
    from marinbuild.store.gcs import GCSStore


@dataclass
class Session:
    workspace: Workspace
    store_url: str
    cwd: Path
    unsafe_no_locking: bool = False

    @classmethod
    def open(
        cls,
        workspace_dir: Path | None = None,
        store: str | None = None,
        cwd: Path | None = None,
        unsafe_no_locking: bool = False,
    ) -> Session:
        cwd = (cwd or Path.cwd()).resolve()
        workspace = open_workspace(workspace_dir or cwd)
        return cls(
            workspace, stores.resolve_store_url(store or workspace.store, workspace.root), cwd, unsafe_no_locking
        )

    def _memo(self, name: str, version: str) -> Memo:
        return Memo(self.workspace.state_dir / name, version)

    @cached_property
    def stat_cache(self) -> StatCache:
        return StatCache(self._memo("stat-cache.pickle", "stat-cache-1"))

    @cached_property
    def loader(self) -> PackageLoader:
        rules = workspace_rules(self.workspace)
        code = {str(path): self.stat_cache.digest(path)[0] for path in loading_code(self.workspace)}
        memo = self._memo("packages.pickle", rules_fingerprint(rules, code))
        return PackageLoader(self.workspace, rules, PackageCache(memo, self.workspace.root, self.stat_cache))

    @cached_property
    def _buckets(self) -> tuple[stores.Store, list[GCSStore]]:
        """The store, and its mirrors in other regions: with mirrors, the bucket of this
        builder's region is the store (store/mirrors.py)."""
        spec = stores.StoreSpec(self.store_url, self.workspace.store_timeout_s, self.workspace.store_retry_budget_s)
        if not self.workspace.mirrors:
            return stores.open_store(spec, self.workspace.state_dir, self.stat_cache), []
        region = os.environ.get(REGION_ENV) or self.workspace.region
        return arrange(spec, self.workspace.mirrors, region, self.workspace.state_dir, self.stat_cache, self._regions)

    @cached_property
    def _regions(self) -> BucketRegions:
        """Where each bucket is (GCS's answer, remembered on this machine)."""
        return BucketRegions(self._memo("bucket-regions.pickle", "bucket-regions-1"))

    @cached_property
    def store(self) -> stores.Store:
        return self._buckets[0]

    @cached_property
    def cache(self) -> ActionCache:
        memo = self._memo("entries.pickle", f"entries-{ENTRY_FORMAT}-checksums-code-kept")
        cache = ActionCache(self.store, self.stat_cache, memo)
        if self._buckets[1]:
            cache.mirrors = Mirrors(cache, self._buckets[1], self._regions)
        return cache

    @cached_property
    def pins(self) -> Pins:
        return Pins(self.workspace.root, self.cache.records, self.workspace.state_dir, self.stat_cache)

    def egress(self, allowed: bool = False) -> Egress | None:
        """What a build may copy from the store's mirrors (None: it has none), and where the
        budget is set, for the error that stops a build past it."""
        if not self.workspace.mirrors:
            return None
        where = self.workspace.setting_location("egress_budget_gb")
        config = self.workspace.config_file.name
        setting = f"egress_budget_gb ({where})" if where else f"egress_budget_gb in {config} (default 10)"
        return Egress(self.workspace.egress_budget_gb, allowed, setting)

    def skip_dirs(self) -> tuple[Path, ...]:
        """Directories never scanned for packages: a store inside the workspace, for one."""
        directory = stores.parse_store_url(self.store_url).local_directory
        return () if directory is None else (directory,)

    def plan(self, patterns: Sequence[str]) -> Graph:
        """Load what the patterns need and return the checked graph. Pure: no store I/O."""
        cwd_package = self.workspace.package_of(self.cwd)
        parsed = [parse_pattern(text, cwd_package) for text in patterns]
        if not parsed or all(pattern.negative for pattern in parsed):
            raise GraphError("no target patterns given", hint="e.g. 'marinbuild //experiments/hello:all'")
        requested = expand_patterns(self.loader, parsed, self.skip_dirs())
        if not requested:
            raise GraphError(
                f"the patterns {' '.join(patterns)} match no targets",
                hint="targets tagged 'manual' are left out of wildcards",
            )
        graph = build_graph(self.loader, requested)
        self.loader.save_cache()
        self.stat_cache.save()
        return graph

    def scheduler(
        self,
        graph: Graph,
        options: BuildOptions,
        reporter: Reporter,
        executor: Executor | None = None,
        salt: str | None = None,
    ) -> Scheduler:
        """A scheduler over `graph`, with what provenance lends execution: explanations of
        misses and the log of the builder holding a key this build waits for. Unless the
        options say otherwise, the attempts record estimates at the workspace's utilisation,
        whatever command runs them (`build`, `rerun`, the Python API)."""
        if options.utilisation is None:
            options = replace(options, utilisation=self.workspace.utilisation)
        hooks = Hooks(
            explain_miss=functools.partial(explain_miss, self.cache),
            follow_holder=functools.partial(HolderLogTail, self.store),
            resolve_pinned=self.pins.resolve,
        )
        salt = stores.store_salt(self.store) if salt is None else salt
        return Scheduler(graph, self.cache, salt, options, reporter, self.workspace.root, executor, hooks)

    def dry_scheduler(self, graph: Graph, strict_code: bool = False) -> Scheduler:
        """A scheduler that has run dry over `graph`: its results, and the recipes of every key it knows."""
        # Mirrors are looked up as a build would (nothing is copied dry): every read command sees every region.
        options = BuildOptions(jobs=1, dry_run=True, strict_code=strict_code, egress=self.egress())
        scheduler = self.scheduler(graph, options, NullReporter())
        scheduler.run()
        return scheduler

    def dry_run_graph(self, graph: Graph) -> BuildResult:
        """What building `graph` would do; reads the store, writes nothing to it."""
        return self.dry_scheduler(graph).result

    def dry_run(self, labels: Sequence[str]) -> BuildResult:
        """What building these rule targets would do; reads the store, writes nothing to it."""
        return self.dry_run_graph(build_graph(self.loader, list(labels)))

    def last_attempt_status(self, key: str) -> str | None:
        """How the newest attempt at `key` ended (`failed`, `succeeded`, ...), if there was one."""
        record = provenance.last_attempt(self.store, key)
        return None if record is None else record.status.value
