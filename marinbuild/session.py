"""A session ties the layers together for one command: workspace, loader, store, cache.

It is also the Python entry point for notebooks and scripts that want what the CLI
does without a shell.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from marinbuild import provenance
from marinbuild import store as stores
from marinbuild.actions.analysis.graph import Graph, build_graph, expand_patterns
from marinbuild.actions.analysis.keys import checkpoint_key
from marinbuild.actions.analysis.pins import Pinned, Pins
from marinbuild.actions.bookkeeping.build_provenance import Provenance
from marinbuild.actions.bookkeeping.events import EventStream, HitsRecorded, Tee
from marinbuild.actions.bookkeeping.noop_certificate import (
    NOOP_CERTIFICATE_ENV,
    Certified,
    NoopCertificate,
    Warnings,
    environment_context,
)
from marinbuild.actions.bookkeeping.results import (
    BuildResult,
    NullReporter,
    Reporter,
    Status,
    TargetResult,
    pending_json,
)
from marinbuild.actions.execution.accelerators import local_accelerators, missing
from marinbuild.actions.execution.build_options import BuildOptions, Egress, Hooks
from marinbuild.actions.execution.executor import Executor
from marinbuild.actions.execution.hermetic import COMPILATION_CACHE_DIR, StepSettings, with_compilation_cache
from marinbuild.actions.execution.resume import resume_point
from marinbuild.actions.execution.scheduler import Scheduler
from marinbuild.consulted import Consulted, code_files, recording
from marinbuild.errors import AcceleratorMissing, EgressOverBudget, GraphError, StoreError, StoreReadOnly
from marinbuild.hashing import StatCache
from marinbuild.labels import matches_patterns, parse_label, parse_pattern
from marinbuild.memo import Memo
from marinbuild.packages import PackageLoader, Workspace, open_workspace
from marinbuild.packages.package_cache import PackageCache, rules_fingerprint
from marinbuild.packages.rule_modules import loading_code, workspace_rules
from marinbuild.provenance.explain import Explanation, explain_miss, explain_target, recipe_changes
from marinbuild.provenance.log_tail import HolderLogTail
from marinbuild.store import ActionCache, AttemptStatus, Outputs
from marinbuild.store.entries import ENTRY_FORMAT
from marinbuild.store.layout import BOOKKEEPING_AREAS
from marinbuild.store.mirrors import REGION_ENV, BucketRegions, MirrorHit, Mirrors, arrange, budget_line
from marinbuild.store.records import Records
from marinbuild.targets.rule import Target, checkpoint_dir, checkpoint_name
from marinbuild.version import __version__

# What only the read commands use is imported where they run: a build loads none of it.
if TYPE_CHECKING:
    from marinbuild.provenance import rerun
    from marinbuild.provenance.compare import Comparison
    from marinbuild.provenance.in_use import InUse
    from marinbuild.query import QueryResult
    from marinbuild.store.gcs import GCSStore


@contextlib.contextmanager
def _spared_by_the_collector() -> Iterator[Callable[[], None]]:
    """Load and plan without Python's cyclic garbage collector, then freeze what that made
    until the build ends (call the function yielded once planned), and collect the young
    generation less often meanwhile.

    Packages, the graph and the store's memos live as long as the build and hold no
    garbage, but every collection scanned them all again: a seventh to a fifth of a
    10,000-target no-op went to collections that freed nothing, and the share grows with
    the graph. Frozen, they are skipped. A build's own garbage is mostly freed by reference
    counting; the young generation is collected every 20,000 allocations instead of 700.
    All is as it was at the end, so a process that builds again frees what it froze."""
    enabled = gc.isenabled()
    thresholds = gc.get_threshold()
    gc.disable()

    def planned() -> None:
        gc.freeze()
        gc.set_threshold(max(thresholds[0], 20_000), *thresholds[1:])
        if enabled:
            gc.enable()

    try:
        yield planned
    finally:
        gc.set_threshold(*thresholds)
        if enabled:
            gc.enable()
        gc.unfreeze()


def _not_recorded(*args: object) -> None:
    """Where the invocation record goes on a read-only store: nowhere."""


def _lacking_accelerators(graph: Graph) -> dict[str, str]:
    """{label: what it asks for} for each step whose accelerator this machine lacks."""
    asking = {
        label: target.resources
        for label, target in graph.targets.items()
        if (target.attrs["resources"] or {}).get("accelerator") or target.rule.resources.accelerator
    }
    if not asking:
        return {}  # spare the probe (a process) for the common case
    machine = local_accelerators()
    return {label: need for label, resources in asking.items() if (need := missing(resources, machine)) is not None}


@dataclass(frozen=True)
class RerunResult:
    key: str
    label: str
    build: BuildResult
    changes: list[str]  # why the rebuilt recipe has another key (e.g. external inputs differ here)
    identical: bool | None  # the rebuilt output against the recorded one (None: nothing to compare)

    @property
    def ok(self) -> bool:
        return self.build.ok and not self.changes


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

    def egress(self, allowed: bool = False) -> Egress | None:
        """What a build may copy from the store's mirrors (None: it has none), and where the
        budget is set, for the error that stops a build past it."""
        if not self.workspace.mirrors:
            return None
        where = self.workspace.setting_location("egress_budget_gb")
        config = self.workspace.config_file.name
        setting = f"egress_budget_gb ({where})" if where else f"egress_budget_gb in {config} (default 10)"
        return Egress(self.workspace.egress_budget_gb, allowed, setting)

    def _skip_dirs(self) -> tuple[Path, ...]:
        """Directories never scanned for packages: a store inside the workspace, for one."""
        directory = stores.parse_store_url(self.store_url).local_directory
        return () if directory is None else (directory,)

    def plan(self, patterns: Sequence[str]) -> Graph:
        """Load what the patterns need and return the checked graph. Pure: no store I/O."""
        cwd_package = self.workspace.package_of(self.cwd)
        parsed = [parse_pattern(text, cwd_package) for text in patterns]
        if not parsed or all(pattern.negative for pattern in parsed):
            raise GraphError("no target patterns given", hint="e.g. 'marinbuild //experiments/hello:all'")
        requested = expand_patterns(self.loader, parsed, self._skip_dirs())
        if not requested:
            raise GraphError(
                f"the patterns {' '.join(patterns)} match no targets",
                hint="targets tagged 'manual' are left out of wildcards",
            )
        graph = build_graph(self.loader, requested)
        self.loader.save_cache()
        self.stat_cache.save()
        return graph

    def build(
        self,
        patterns: Sequence[str],
        options: BuildOptions,
        reporter: Reporter,
        events: Path | None = None,
        allow_cpu: bool = False,
    ) -> BuildResult:
        """Build; the event stream goes to the store with the invocation record, and to `events`.

        Run here (not on Ray), a step asking for an accelerator this machine lacks is an
        error before anything runs, unless `allow_cpu`: JAX would quietly use the CPU.

        A no-op whose certificate holds (actions/bookkeeping/noop_certificate.py) is answered from it;
        a build that could be certified records what it consults, and certifies itself if
        every target was cached."""
        certificate = self._noop_certificate(patterns, options, events, allow_cpu)
        if certificate is not None and (certified := certificate.read()) is not None:
            return self._serve_certified(certified, list(patterns), reporter)
        consulted = None if certificate is None else Consulted(ignored=self._bookkeeping())
        warnings = Warnings()
        with (
            _spared_by_the_collector() as planned,
            contextlib.nullcontext() if consulted is None else recording(consulted),
        ):
            graph = self.plan(patterns)
            _ = self.cache  # its memo of entries, read now
            planned()
            lacking = {} if options.executor == "ray" or allow_cpu else _lacking_accelerators(graph)
            if options.dry_run:
                return self._annotate_dry_run(graph, self._scheduler(graph, options, reporter), lacking)
            if lacking:
                self._refuse_lacking(graph, lacking)
            scheduler = self._run_recorded("build", graph, list(patterns), options, Tee(reporter, warnings), events)
        if certificate is not None and consulted is not None and scheduler.read_only is None:
            consulted.sign(code_files())
            certificate.write(consulted, scheduler.result, len(graph.targets), warnings.messages)
        return scheduler.result

    def _noop_certificate(
        self, patterns: Sequence[str], options: BuildOptions, events: Path | None, allow_cpu: bool
    ) -> NoopCertificate | None:
        """The certificate of this build, if it is one a certificate may answer: a real
        build (not dry, not explained) run here, on a local store without mirrors, its
        events going nowhere else, by a session that has loaded no package yet (one that
        has would not consult their files again). Its context is everything besides the
        files consulted that the build's answer may depend on."""
        if options.dry_run or options.explain or options.executor != "local" or events is not None:
            return None
        if "loader" in vars(self):  # a session that planned before (a notebook's): packages in memory
            return None
        if self.workspace.mirrors or os.environ.get(NOOP_CERTIFICATE_ENV) == "0":
            return None
        if stores.parse_store_url(self.store_url).local_directory is None:
            return None
        context = {
            "command": "build",
            "marinbuild": __version__,
            "python": sys.version,
            "executable": sys.executable,
            "sys_path": sys.path,
            "patterns": list(patterns),
            "options": repr(options),
            "allow_cpu": allow_cpu,
            "cwd": os.fspath(self.cwd),
            "workspace": repr(self.workspace),
            "store": self.store_url,
            "unsafe_no_locking": self.unsafe_no_locking,
            "environment": environment_context(os.environ),
        }
        return NoopCertificate(self.workspace.state_dir / "noop", context)

    def _bookkeeping(self) -> tuple[str, ...]:
        """What every build writes and none decides from: the machine's memos (each a
        checked shortcut), and the store's records, leases and staging."""
        store = stores.parse_store_url(self.store_url).local_directory
        areas = () if store is None else tuple(os.fspath(store / area) for area in BOOKKEEPING_AREAS)
        return (os.fspath(self.workspace.state_dir), *areas)

    def _serve_certified(self, certified: Certified, patterns: list[str], reporter: Reporter) -> BuildResult:
        """A no-op answered by its certificate: reported, streamed and recorded as the full
        path reports, streams and records it; the record says it was certified."""
        store = stores.open_store(self.store_url, self.workspace.state_dir)  # no memo: nothing is verified here
        stores.require_leases(store, self.unsafe_no_locking)
        stream = EventStream()
        tee = Tee(reporter, stream)
        record = functools.partial(
            self._record_invocation,
            Records(store),
            "build",
            patterns,
            Provenance(self.workspace.root),
            time.time(),
            list(certified.results),
        )
        record(BuildResult(certified.requested), "running", certified=True)
        started = time.monotonic()
        tee.build_started(certified.total)
        for item in certified.results.values():
            tee.step_finished(item)
        for message in certified.warnings:
            tee.warning(message)
        result = certified.build_result()
        result.elapsed_s = time.monotonic() - started
        tee.build_finished(result)
        record(result, "succeeded", stream, certified=True)
        return result

    def _annotate_dry_run(self, graph: Graph, scheduler: Scheduler, lacking: dict[str, str]) -> BuildResult:
        """Run `scheduler` dry and add to its reasons what the steps would do besides
        running: resume from an earlier attempt's checkpoints, or stop the build for want
        of an accelerator; and end it with what its copies from mirrors would cost against
        the egress budget (a dry run over it still exits 0: it says so, and stops nothing)."""
        result = scheduler.run()
        egress = scheduler.options.egress
        if egress is not None:
            foreseen = list(scheduler.foreseen.values())
            line = budget_line(foreseen, egress.budget_gb, egress.allowed, egress.setting)
            result.notes.extend([line] if line else [])
        for label, item in result.results.items():
            notes = []
            if item.status is Status.WOULD_RUN and item.key is not None:
                point = resume_point(self.store, graph.targets[label].rule, item.key)
                if point is not None:
                    notes.append(f"would resume from {point}")
            if label in lacking and item.status in (Status.WOULD_RUN, Status.PENDING):
                notes.append(f"needs {lacking[label]}, which this machine lacks: a build here stops unless --allow-cpu")
            if notes:
                reason = "; ".join(filter(None, [item.reason, *notes]))
                result.results[label] = dataclasses.replace(item, reason=reason)
        return result

    def _refuse_lacking(self, graph: Graph, lacking: dict[str, str]) -> None:
        """Stop (exit 2) if a step that would run asks for an accelerator this machine lacks."""
        results = self._dry_run(graph).results
        to_run = [label for label in lacking if results[label].status in (Status.WOULD_RUN, Status.PENDING)]
        if not to_run:
            return
        shown = "; ".join(f"{label} asks for {lacking[label]}" for label in to_run[:5])
        more = f" (and {len(to_run) - 5} more)" if len(to_run) > 5 else ""
        raise AcceleratorMissing(
            f"{shown}{more}, but this machine has {local_accelerators().describe()}: "
            "run here, JAX would train on the CPU",
            hint="run it where the accelerator is, with --executor ray (docs/cluster.md), "
            "or pass --allow-cpu to run it on this machine anyway",
        )

    def _run_recorded(
        self,
        command: str,
        graph: Graph,
        patterns: list[str],
        options: BuildOptions,
        reporter: Reporter,
        events: Path | None = None,
    ) -> Scheduler:
        """Run a graph with its invocation record (written at the start and at the end) and event stream."""
        stores.require_leases(self.store, self.unsafe_no_locking)
        salt = stores.store_salt(self.store, create=True)
        stream = EventStream(events)
        hits = HitsRecorded()
        executor = self._executor(options)
        scheduler = self._scheduler(graph, options, Tee(reporter, stream, hits), executor, salt)
        record = functools.partial(
            self._record_invocation,
            self.cache.records,
            command,
            patterns,
            scheduler.provenance,
            time.time(),
            scheduler.graph.order,
            scheduler.result,
        )
        try:
            record("running")
        except StoreReadOnly as refused:
            # Readers of a team's bucket may not write to it: what is cached is still theirs.
            reporter.warning(f"{refused.message}; this build is not recorded in the store's history")
            scheduler.read_only = refused
            record = _not_recorded
        hits.rewrite = functools.partial(record, "running")
        try:
            result = scheduler.run()
        except KeyboardInterrupt:
            record("interrupted", stream)
            raise
        except EgressOverBudget:
            record("failed", stream)
            raise
        finally:
            if executor is not None:
                executor.close()
        record("succeeded" if result.ok else "failed", stream)
        return scheduler

    def _executor(self, options: BuildOptions) -> Executor | None:
        """None: the scheduler's local default."""
        if options.executor != "ray":
            return None
        from marinbuild.cluster.ray_executor import RayExecutor  # imports Ray: only when asked for

        return RayExecutor(
            self.store,
            self.workspace.root,
            options.ray_address,
            options.ray_placement_timeout_s,
            options.ray_shared_scratch,
            options.steps,
        )

    def _record_invocation(
        self,
        records: Records,
        command: str,
        patterns: Sequence[str],
        provenance: Provenance,
        started: float,
        order: list[str],
        result: BuildResult,
        outcome: str,
        stream: EventStream | None = None,
        certified: bool = False,
    ) -> None:
        """Written when the build starts and again when it ends (provenance/history.py).
        The provenance is the build's, so git is asked about the workspace once per build;
        `certified`: the results are a no-op certificate's (actions/bookkeeping/noop_certificate.py)."""
        if list(result.results) == order:  # every target has its result, in the graph's order
            targets = result.targets_json()
        elif not result.results:  # the build starts
            targets = pending_json(order)
        else:
            results = result.results
            targets = json.dumps(
                [
                    results[label].to_json() if label in results else {"label": label, "key": None, "status": "pending"}
                    for label in order
                ]
            )
        record = {
            "id": provenance.invocation_id,
            "command": command,
            "patterns": list(patterns),
            "cwd": os.fspath(self.cwd),
            "workspace": os.fspath(self.workspace.root),  # which checkout (`cache gc` on a shared store)
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "duration_s": round(time.time() - started, 3),
            "result": outcome,
            "counts": result.counts,
            **provenance.invocation,
            **({"noop_certificate": True} if certified else {}),
        }
        records.write_invocation(record, None if stream is None else stream.jsonl, targets)

    def step_settings(self, sandbox: bool | None = None) -> StepSettings:
        """How this workspace's steps run (environment, sandbox, default timeout); `sandbox`
        overrides the setting. Steps share this machine's JAX compilation cache, beside its
        local cache of the store (`.marinbuild/jax-cache`), unless the environment names one."""
        workspace = self.workspace
        action_env = with_compilation_cache(
            workspace.action_env, os.environ, workspace.state_dir / COMPILATION_CACHE_DIR
        )
        return StepSettings(action_env, workspace.sandbox if sandbox is None else sandbox, workspace.timeout_s)

    def _scheduler(
        self,
        graph: Graph,
        options: BuildOptions,
        reporter: Reporter,
        executor: Executor | None = None,
        salt: str | None = None,
    ) -> Scheduler:
        """A scheduler over `graph`, with what provenance lends execution: explanations of
        misses and the log of the builder holding a key this build waits for."""
        hooks = Hooks(
            explain_miss=functools.partial(explain_miss, self.cache),
            follow_holder=functools.partial(HolderLogTail, self.store),
            resolve_pinned=self.pins.resolve,
        )
        salt = stores.store_salt(self.store) if salt is None else salt
        return Scheduler(graph, self.cache, salt, options, reporter, self.workspace.root, executor, hooks)

    @cached_property
    def pins(self) -> Pins:
        return Pins(self.workspace.root, self.cache.records, self.workspace.state_dir, self.stat_cache)

    def pin(self, patterns: Sequence[str]) -> list[Pinned]:
        """Pin the external artifacts the patterns name: list what each URL holds (nothing
        is downloaded) and record its digest in marinbuild.lock (actions/analysis/pins.py)."""
        graph = self.plan(patterns)
        targets = [graph.targets[label] for label in graph.requested if graph.targets[label].rule.pinned]
        if not targets:
            raise GraphError(
                f"{' '.join(patterns)} names no external artifact",
                hint="pin targets of the rule external(name, url)",
            )
        return self.pins.pin(targets)

    def resolve_output(self, text: str) -> tuple[str, str | None]:
        """The key of an output named by a key (or a unique prefix of one) or by a label, and a
        note when a label's current recipe is not built and its newest output is used instead."""
        from marinbuild.provenance import rerun

        if ":" not in text and "/" not in text:
            return rerun.find_key(self.cache, text), None
        graph = self.plan([text])
        if len(graph.requested) != 1:
            raise GraphError(f"'{text}' names {len(graph.requested)} targets; give one label")
        label = graph.requested[0]
        result = self._dry_run(graph).results[label]
        if result.status in (Status.CACHED, Status.WOULD_COPY) and result.key is not None:
            return result.key, None  # built here, or only in a mirror (`describe` says which)
        for record in reversed(provenance.label_attempts(self.store, label)):
            if record.status is stores.AttemptStatus.SUCCEEDED and self.cache.lookup(record.key).outputs is not None:
                return (
                    record.key,
                    f"{label} is not built for its current recipe ({result.reason}); this is its newest output",
                )
        raise GraphError(
            f"{label} has no output in {self.store.url} ({result.reason})", hint=f"run 'marinbuild build {label}'"
        )

    def show(self, text: str, recursive: bool = False) -> tuple[dict, str | None]:
        """The recipe, provenance, files and metrics of an output (provenance/show.py); for
        an external artifact, where it lives and its pin."""
        from marinbuild.provenance.show import describe

        if ":" in text or "/" in text:
            graph = self.plan([text])
            target = graph.targets[graph.requested[0]] if len(graph.requested) == 1 else None
            if target is not None and target.rule.pinned:
                return self.pins.describe(target), None
        key, note = self.resolve_output(text)
        return describe(self.cache, key, workspace_rules(self.workspace), recursive), note

    def rerun(self, key_text: str, options: BuildOptions, reporter: Reporter) -> RerunResult:
        """Rebuild the recipe stored under a key (a unique prefix will do) from the store alone:
        what is cached is reused, what is missing is built again (provenance/rerun.py)."""
        from marinbuild.provenance import rerun

        key = rerun.find_key(self.cache, key_text)
        recorded = self.cache.read_entry(key)
        with tempfile.TemporaryDirectory(prefix="marinbuild-rerun-") as sources:
            graph = rerun.recipe_graph(self.cache, workspace_rules(self.workspace), key, Path(sources))
            scheduler = self._run_recipe(graph, key, options, reporter, "rerun")
        label = graph.requested[0]
        result = scheduler.result.results[label]
        changes = []
        if result.key is not None and result.key != key:
            before = recorded.recipe if isinstance(recorded, stores.CacheEntry) else {}
            changes = recipe_changes(before, scheduler.recipe(label) or {}, graph.targets[label])
        outputs = self.cache.lookup(result.key).outputs if result.key == key else None
        identical = None
        if isinstance(recorded, stores.CacheEntry) and outputs is not None:
            identical = outputs.tree_digest == recorded.tree_digest
        return RerunResult(key, label, scheduler.result, changes, identical)

    def check(self, key_text: str, options: BuildOptions, reporter: Reporter) -> rerun.CheckReport:
        """Run the recipe of a cached key again, aside, and compare with what is published."""
        from marinbuild.provenance import rerun

        key = rerun.find_key(self.cache, key_text)
        with tempfile.TemporaryDirectory(prefix="marinbuild-rerun-") as sources:
            graph = rerun.recipe_graph(self.cache, workspace_rules(self.workspace), key, Path(sources))
            scheduler = self._run_recipe(graph, key, options, reporter, "rerun --check")
            label = graph.requested[0]
            if not scheduler.result.ok or scheduler.result.results[label].key != key:
                raise StoreError(
                    f"the recipe of {key[:12]} could not be rebuilt here",
                    hint=f"'marinbuild rerun {key[:12]}' says why",
                )
            side, outcome = scheduler.run_aside(label)
        if outcome.status is not AttemptStatus.SUCCEEDED:
            raise StoreError(
                f"the rerun of {label} failed: {outcome.error}",
                hint=f"its log: 'marinbuild log {label}' (attempt {side.attempt_id})",
            )
        report = rerun.check_outputs(self.cache, graph.targets[label].rule, key, side.staging.out)
        if report.identical:
            shutil.rmtree(side.staging.root, ignore_errors=True)
        return report

    def _run_recipe(self, graph: Graph, key: str, options: BuildOptions, reporter: Reporter, command: str) -> Scheduler:
        from marinbuild.provenance import rerun

        strict = rerun.stored_recipe(self.cache, key).strict_code
        return self._run_recorded(command, graph, [key], dataclasses.replace(options, strict_code=strict), reporter)

    def dry_run(self, labels: Sequence[str]) -> BuildResult:
        """What building these rule targets would do; reads the store, writes nothing to it."""
        return self._dry_run(build_graph(self.loader, list(labels)))

    def _dry_run(self, graph: Graph) -> BuildResult:
        return self._dry_scheduler(graph).result

    def _dry_scheduler(self, graph: Graph, strict_code: bool = False) -> Scheduler:
        """A scheduler that has run dry over `graph`: its results, and the recipes of every key it knows."""
        # Mirrors are looked up as a build would (nothing is copied dry): every read command sees every region.
        options = BuildOptions(jobs=1, dry_run=True, strict_code=strict_code, egress=self.egress())
        scheduler = self._scheduler(graph, options, NullReporter())
        scheduler.run()
        return scheduler

    def explain(self, label: str, strict_code: bool = False) -> Explanation:
        """Whether a target would run and why: each ingredient of its key, and for a miss the
        differences from its nearest earlier entry (provenance/explain.py). Writes nothing."""
        graph = self.plan([label])
        if len(graph.requested) != 1:
            raise GraphError(f"'{label}' names {len(graph.requested)} targets; 'explain' takes one label")
        scheduler = self._dry_scheduler(graph, strict_code)
        explanation = explain_target(
            self.cache, scheduler.graph, scheduler.result, scheduler.recipe, graph.requested[0]
        )
        if explanation.status == "would-run" and explanation.key is not None:
            point = resume_point(self.store, graph.targets[explanation.label].rule, explanation.key)
            explanation = dataclasses.replace(explanation, resumes_from=point)
        return explanation

    def compare(
        self, patterns: Sequence[str], by: str | None = None, maximize: bool = False, history: bool = False
    ) -> Comparison:
        """The training runs among the targets the patterns name, side by side, with their
        evaluations among them; with `history`, their earlier outputs still in the store
        too (provenance/compare.py). Reads the store, writes nothing."""
        from marinbuild.provenance.compare import compare as compare_runs

        graph = self.plan(patterns)
        planned = self._dry_run(graph)
        return compare_runs(
            self.cache,
            graph,
            planned,
            workspace_rules(self.workspace),
            by=by,
            maximize=maximize,
            history=history,
        )

    def last_attempt_status(self, key: str) -> str | None:
        """How the newest attempt at `key` ended (`failed`, `succeeded`, ...), if there was one."""
        record = provenance.last_attempt(self.store, key)
        return None if record is None else record.status.value

    def attempts(self, label: str) -> list[provenance.AttemptRecord]:
        """Every recorded attempt of a target, at any of its keys, oldest first. `label` may
        be relative to the current directory; the target need not exist any more."""
        return provenance.label_attempts(self.store, str(parse_label(label, self.workspace.package_of(self.cwd))))

    def history(
        self, patterns: Sequence[str] = (), limit: int | None = None, ran_only: bool = True
    ) -> list[provenance.HistoryItem]:
        """The newest builds that ran (or skipped) a target the patterns match (all, without patterns)."""
        cwd_package = self.workspace.package_of(self.cwd)
        parsed = [parse_pattern(text, cwd_package) for text in patterns]
        items = provenance.history(
            self.store, lambda label: matches_patterns(parsed, parse_label(label)), limit, ran_only
        )
        recorded = {outcome.label for item in items for outcome, _attempt in item.outcomes}
        for pattern in parsed:
            if not pattern.negative and not any(matches_patterns([pattern], parse_label(label)) for label in recorded):
                # An unknown package or target is bad input (exit 2), as for build, not an
                # empty history; a target deleted since its builds still shows them.
                expand_patterns(self.loader, [pattern], self._skip_dirs())
        return items

    def query(self, expression: str, keep_going: bool = False) -> QueryResult:
        """Evaluate a query expression (docs/query.md). Writes nothing to the store."""
        from marinbuild.query import Universe, run_query

        universe = Universe(self.loader, self.workspace.package_of(self.cwd), self._skip_dirs(), keep_going)
        result = run_query(expression, universe, self)
        self.loader.save_cache()
        self.stat_cache.save()
        return result

    def workspace_keys(self) -> set[str]:
        """The current key of every rule target of the workspace, `manual` ones included
        (what `cache gc` keeps). A target downstream of a missing output has no key yet."""
        packages = self.workspace.find_packages("", self._skip_dirs())
        labels = [str(target.label) for package in packages for target in self.loader.package(package).targets.values()]
        return self._current_keys(build_graph(self.loader, labels)) if labels else set()

    def keys_in_use(self) -> tuple[set[str], InUse]:
        """What `cache gc` keeps: this workspace's current keys, and the key each workspace
        that built into the store recorded for each target in its newest build of it
        (provenance/in_use.py), with who those workspaces are."""
        from marinbuild.provenance.in_use import workspaces_in_use

        found = workspaces_in_use(self.store)
        return self.workspace_keys() | found.keys, found

    def pattern_keys(self, patterns: Sequence[str]) -> set[str]:
        """The current keys of the targets the patterns name (not of their dependencies)."""
        graph = self.plan(patterns)
        return self._current_keys(graph, graph.requested)

    def _current_keys(self, graph: Graph, labels: Sequence[str] | None = None) -> set[str]:
        results = self._dry_run(graph).results
        return {results[label].key for label in (labels or results) if results[label].key is not None}

    def where(self, pattern: str) -> Path:
        """The output directory of a built target whose recipe is current."""
        return self.cache.local_dir(self.current_output(pattern)[1])

    def location(self, pattern: str, step: int | None = None) -> tuple[str, str | None]:
        """Where the output of a built target is (`marinbuild where`): its directory here;
        for one built only in a mirror, its URL there (nothing is read or copied) and a
        note saying where that is and what a build here would copy. With `step`, the same
        for the state it kept at that step, which is an entry of its own (and which the
        note names for a target that keeps states, asked without a step)."""
        graph, result = self._current(pattern)
        target, hit = graph.targets[result.label], self._mirror_only(result)
        kept = (target.attrs[target.rule.keeps_checkpoints] or []) if target.rule.keeps_checkpoints else []
        if step is not None:
            return self._kept_location(graph, result, hit, kept, step)
        if hit is not None:
            return hit.output_url, f"{result.label} is {hit.elsewhere()}"
        note = None
        if kept:
            steps = ", ".join(str(at) for at in kept)
            note = (
                f"{result.label} keeps checkpoints at steps {steps}, each an entry of its own, not in this "
                f"directory: 'marinbuild where --step {kept[0]} {result.label}'"
            )
        return str(self.cache.local_dir(self._verified_outputs(graph, result)[1])), note

    def _kept_location(
        self, graph: Graph, result: TargetResult, hit: MirrorHit | None, kept: list[int], step: int
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
        keeper = self._verified_outputs(graph, result)[1] if hit is None else None  # built, as it is now
        assert result.key is not None  # built, or in a mirror
        key = checkpoint_key(result.key, step)
        state = hit.kept_state(key) if hit is not None else None
        if state is not None:
            return state.output_url, f"{name} is {state.elsewhere()}"
        outputs = self.cache.lookup(key).outputs
        if outputs is not None:
            return str(self.cache.local_dir(outputs)), None
        if keeper is not None and any(
            item.path.startswith(checkpoint_dir(step) + "/") for item in keeper.manifest.files
        ):
            return str(self.cache.local_dir(keeper) / checkpoint_dir(step)), None
        raise StoreError(
            f"{name} has no usable entry in the store {self.store.url}",
            hint=f"'marinbuild build {result.label}' builds it again",
        )

    def current_output(self, pattern: str) -> tuple[Target, Outputs]:
        """A target and its verified outputs, for its current recipe."""
        return self._verified_outputs(*self._current(pattern))

    def _current(self, pattern: str) -> tuple[Graph, TargetResult]:
        """The graph of one target, and what a build would do with it."""
        graph = self.plan([pattern])
        if len(graph.requested) != 1:
            raise GraphError(f"'{pattern}' names {len(graph.requested)} targets; give one label")
        return graph, self._dry_run(graph).results[graph.requested[0]]

    def _verified_outputs(self, graph: Graph, result: TargetResult) -> tuple[Target, Outputs]:
        label = result.label
        hit = self._mirror_only(result)
        if hit is not None:
            raise GraphError(f"{label} is {hit.elsewhere()}", hint=f"'marinbuild build {label}' copies it here")
        if result.status is not Status.CACHED:
            raise GraphError(f"{label} is not built ({result.reason})", hint=f"run 'marinbuild build {label}'")
        outputs = self.cache.lookup(result.key).outputs if result.key is not None else None
        if outputs is None:
            raise StoreError(f"{label} vanished from the store {self.store.url} while being looked up")
        return graph.targets[label], outputs

    def _mirror_only(self, result: TargetResult) -> MirrorHit | None:
        """The mirror's entry of a target a build would copy: verified by the dry run, which
        found it (asking again costs no request)."""
        if result.status is not Status.WOULD_COPY or result.key is None or self.cache.mirrors is None:
            return None
        return self.cache.mirrors.hit(result.key)

    def metrics(self, pattern: str) -> dict:
        """The summary metrics of a built ML step (its rule's `metrics_file`); {} for other steps."""
        from marinbuild.provenance.show import read_metrics

        target, outputs = self.current_output(pattern)
        entry = self.cache.read_entry(outputs.key)
        if isinstance(entry, str):
            raise StoreError(entry)
        return read_metrics(self.cache, entry, target.rule)
