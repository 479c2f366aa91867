"""The rules API: what a step kind declares, and the targets a BUILD file instantiates.

A rule is plain data plus an `impl(ctx)` function. Rule modules must stay cheap to
import — loading BUILD files imports them — so heavy libraries (jax, levanter) are
imported inside `impl`.
"""

from __future__ import annotations

import enum
import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from marinbuild.errors import Location
from marinbuild.labels import Label
from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.identity import IdentityTemplate, identity_template
from marinbuild.targets.outputs import Curves, ReportSection
from marinbuild.targets.tpu import TpuSlice, is_tpu_type, tpu_slice

if TYPE_CHECKING:
    from marinbuild.targets.context import Context


class Execution(enum.Enum):
    """Where an implementation runs.

    THREAD suits rules whose impl only waits on a child process (genrule). SUBPROCESS
    isolates user Python code: a crash or a hang cannot take the build down, and
    killing the step kills all of it.
    """

    THREAD = "thread"
    SUBPROCESS = "subprocess"


@dataclass(frozen=True)
class Resources:
    """What a step needs; the local scheduler never oversubscribes CPUs and memory.

    `cpu` and `memory_gb` are per host. `accelerator` is a GPU kind ("H100", with
    `accelerator_count` GPUs per host) or a TPU slice type ("v5p-64": the type says the
    chips and hosts; `slices` asks for several). `hosts` runs a multi-host step (GPU or
    CPU) as that many processes, one per host. The local scheduler records accelerators
    but runs on whatever this machine has; the Ray executor places steps by them.
    """

    cpu: float = 1.0
    memory_gb: float = 0.0
    accelerator: str | None = None
    accelerator_count: int = 0
    hosts: int = 1
    slices: int = 1

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None, default: Resources) -> Resources:
        if not value:
            return default
        known = {"cpu", "memory_gb", "accelerator", "accelerator_count", "hosts", "slices"}
        unknown = set(value) - known
        if unknown:
            raise ValueError(f"unknown resource fields {sorted(unknown)}; known: {', '.join(sorted(known))}")
        resources = cls(
            cpu=float(value.get("cpu", default.cpu)),
            memory_gb=float(value.get("memory_gb", default.memory_gb)),
            accelerator=value.get("accelerator", default.accelerator),
            accelerator_count=int(value.get("accelerator_count", default.accelerator_count)),
            hosts=int(value.get("hosts", default.hosts)),
            slices=int(value.get("slices", default.slices)),
        )
        resources.check()
        return resources

    @property
    def tpu(self) -> TpuSlice | None:
        return tpu_slice(self.accelerator) if is_tpu_type(self.accelerator) else None

    @property
    def processes(self) -> int:
        """How many processes (one per host) the step runs as."""
        tpu = self.tpu
        return tpu.hosts * self.slices if tpu is not None else self.hosts

    def check(self) -> None:
        if self.hosts < 1 or self.slices < 1:
            raise ValueError("resources: 'hosts' and 'slices' must be at least 1")
        if is_tpu_type(self.accelerator):
            tpu_slice(str(self.accelerator))
            if self.hosts != 1:
                raise ValueError(
                    f"resources: a TPU slice's type says its hosts ({self.accelerator}); "
                    "ask for more with 'slices', not 'hosts'"
                )
        elif self.slices != 1:
            raise ValueError("resources: 'slices' counts TPU slices; give a TPU type as 'accelerator' (e.g. v5p-64)")


@dataclass(frozen=True)
class RetryPolicy:
    """How often a step is tried again within one build; each try is an attempt record.

    `worker_lost`: after the process running it died without reporting (preempted host,
    killed worker, lost node) — a resumable rule continues from its checkpoints.
    `failed`: after the step itself failed (an exception, a non-zero exit).
    """

    worker_lost: int = 2
    failed: int = 0


# Attributes every rule has. None of them is identity: renaming a target, retagging it
# or giving it more CPUs must never rerun it.
COMMON_ATTRS: dict[str, Attr] = {
    "name": Attr(types.STRING, identity=False, doc="The target's name within its package."),
    "tags": Attr(types.STRING_LIST, default=[], identity=False, doc="'manual' keeps it out of wildcards."),
    "description": Attr(types.STRING, default="", identity=False),
    "resources": Attr(
        types.DICT,
        default={},
        identity=False,
        doc="{'cpu': N, 'memory_gb': N, 'accelerator': 'H100' or 'v5p-64', 'accelerator_count': 8, "
        "'hosts': N, 'slices': N}",
    ),
    "timeout": Attr(
        types.SECONDS,
        default=None,
        identity=False,
        doc="Seconds an attempt may run before its processes are killed (default: the workspace's timeout_s).",
    ),
}


@dataclass(frozen=True)
class StepInput:
    """A label attribute read at a step: with the attribute `step` set, the label stands
    for the state the named target kept at that step (`Rule.keeps_checkpoints`), so the
    reader's key holds that state's digest, not the whole output's, and it can run as soon
    as that state exists, before the named target's step ends.

    `names` says what the label must name, for errors ("a train_lm target"). `check`, given
    the reader's attributes and the named target's, raises ValueError when the two do not
    fit together (another model config); it runs when the graph is planned, before
    anything runs, so the error names the reader's BUILD line."""

    step: str
    names: str
    check: Callable[[Mapping[str, JsonValue], Mapping[str, JsonValue]], None] | None = None


# Where the implementation of a target that keeps states puts each, in its output; taken
# out of it when the step ends, each published as an entry of its own (kept_states.py).
CHECKPOINTS_DIR = "checkpoints"


def checkpoint_dir(step: int) -> str:
    return f"{CHECKPOINTS_DIR}/step-{step}"


def checkpoint_name(label: str, step: int) -> str:
    """How the graph, the inputs of a step (`ctx.url(name)`) and the records name the state
    `label` kept at `step`. The space keeps it apart from every label."""
    return f"{label} at step {step}"


# Reads a file of a key's scratch space, by its path relative to it: its bytes, None if absent.
ReadScratch = Callable[[str], "bytes | None"]


@dataclass(frozen=True)
class Rule:
    """A kind of step: its name, attributes and `impl(ctx)`, and what the engine should know
    of it. Only `name`, `version` and the identity attributes enter a step's key: bump
    `version` when a change of `impl` should rebuild old outputs."""

    name: str
    impl: Callable[[Context], None]
    attrs: Mapping[str, Attr]
    version: int = 1
    doc: str = ""
    # -- how a step runs
    resources: Resources = Resources()
    execution: Execution = Execution.THREAD
    retry: RetryPolicy = RetryPolicy()
    # Resumes from its checkpoints in the key's scratch space after an interrupted attempt.
    resumable: bool = False
    # Runs once per host of a multi-host request, each process seeing `ctx.distributed`.
    multi_host: bool = False
    # `impl` drives units of work (`ctx.map_shards`, targets/shards.py), each under a key of
    # its own; it runs in the builder, the units in worker processes or as Ray tasks.
    sharded: bool = False
    # Reads its inputs by `ctx.url(label)` (fsspec, tensorstore): nothing is downloaded for it.
    reads_urls: bool = False
    # Environment variables given besides the allow-list ("NAME" passed on, "NAME=value"
    # set); recorded in each attempt, never in the key.
    env: tuple[str, ...] = ()
    # -- what it reads and records
    # Checks across attributes when a BUILD file is loaded (ValueError names its line).
    validate: Callable[[Mapping[str, JsonValue]], None] | None = None
    # Files outside the workspace the step reads, by a stable name: their content digests
    # enter the key, never their location.
    external_inputs: Callable[[Mapping[str, JsonValue]], Mapping[str, Path]] | None = None
    # Distributions whose versions each output's provenance records (e.g. "jax").
    packages: tuple[str, ...] = ()
    # Modules `impl` imports lazily whose source is part of the rule's code digest.
    code_modules: tuple[str, ...] = ()
    # A target names data that exists already (`external`): never run, its output pinned.
    pinned: bool = False
    # -- what its output holds, for show, compare and the report (targets/outputs.py)
    # One cheap line about an output (a final loss), printed after a build naming it.
    headline: Callable[[Path], str | None] | None = None
    # A JSON file of the step's summary numbers, for `show` and `marinbuild.metrics()`.
    metrics_file: str | None = None
    # The metrics a training step logs per step: its output is a run.
    curves: Curves | None = None
    # An evaluation's numbers by what it evaluated, {data set or task: {metric: value}}:
    # `compare` and the report name them `eval.<what>.<metric>`.
    evaluated: Callable[[Mapping[str, Any]], Mapping[str, Mapping[str, Any]]] | None = None
    # The rule's own section of the report.
    report_section: ReportSection | None = None
    # For outputs whose bytes are not reproducible (training): `rerun --check` compares
    # these metrics of `metrics_file`, each within its relative tolerance.
    check_metrics: Mapping[str, float] | None = None
    # The FLOPs a step computes (a training's: steps × batch × sequence × FLOPs per token),
    # from its attributes and the targets they name (`lookup(label)`: its data, the model it
    # starts from), before it runs: a dry run and `--max-accelerator-hours` turn them into
    # accelerator-hours (targets/compute.py). None where only an input's files would say.
    flops: Callable[[Mapping[str, JsonValue], Callable[[str], Target | None]], float | None] | None = None
    # -- checkpoints
    # Where a new attempt would resume, in words, from the files of a key's scratch space
    # (their paths, and a function reading one); None: from the start.
    resume_point: Callable[[Sequence[str], ReadScratch], str | None] | None = None
    # The attribute listing the steps at which a target keeps a state: each is an entry of
    # its own (docs/checkpoints.md), published as the step reaches it, which other targets
    # read by `step_inputs`.
    keeps_checkpoints: str | None = None
    # Label attributes that, with their step attribute set, read one kept state of the
    # target they name: `eval_lm(model = ":run", step = 2000)`.
    step_inputs: Mapping[str, StepInput] = field(default_factory=dict)
    all_attrs: Mapping[str, Attr] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        clash = set(self.attrs) & set(COMMON_ATTRS)
        if clash:
            raise ValueError(f"rule {self.name} redeclares common attributes {sorted(clash)}")
        object.__setattr__(self, "all_attrs", {**COMMON_ATTRS, **self.attrs})
        if self.sharded and (self.execution is not Execution.THREAD or self.multi_host or self.resumable):
            raise ValueError(
                f"rule {self.name} is sharded: its impl runs in the builder (Execution.THREAD), on one host, "
                "and resumes from the units it published, so it is neither multi_host nor resumable"
            )

    @property
    def impl_path(self) -> str:
        """`module:function`, so a worker process can import the implementation."""
        return f"{self.impl.__module__}:{self.impl.__qualname__}"


def import_function(path: str, workspace: Path | None = None) -> Callable[..., Any]:
    """The function a "module:function" path names (a rule's impl, a unit's, a report section),
    imported as the loader imported it from `workspace` (see `import_rule_package`)."""
    module, _, name = path.partition(":")
    if workspace is not None:
        import_rule_package(module, workspace)
    return getattr(importlib.import_module(module), name)


def import_rule_package(module: str, workspace: Path) -> None:
    """Import the top-level package of `module` from where it is installed, if it is, when
    the workspace holds a folder of that name that is no package (no `__init__.py`).

    Such a folder is where a workspace keeps its copies of a package's macros — `rules/lm/`
    for `//rules/lm:lm.star` — and on the path before an editable install (whose finder
    Python asks last) it would be imported as a namespace package that hides the installed
    one: `rules.lm.decls` would not be found. A workspace's own package of rules (with its
    `__init__.py`) is imported from the workspace as before."""
    top = module.partition(".")[0]
    folder = workspace / top
    if top in sys.modules or not folder.is_dir() or (folder / "__init__.py").exists():
        return
    root = workspace.resolve()
    saved = sys.path[:]
    sys.path[:] = [entry for entry in saved if Path(entry or os.curdir).resolve() != root]
    try:
        package = importlib.import_module(top)
    except ImportError:
        return
    finally:
        sys.path[:] = saved
    if getattr(package, "__file__", None) is None:  # a namespace package of other folders: not installed
        del sys.modules[top]


@dataclass(frozen=True, eq=False)
class Target:
    """One instantiation of a rule in a BUILD file, with attributes checked and defaulted.

    Attribute values are JSON-like and every label in them is absolute, so a target is
    fully described by its label, rule and attrs.
    """

    label: Label
    rule: Rule
    attrs: Mapping[str, JsonValue]
    location: Location
    # Every label the attributes mention, in attribute order, deduplicated: computed once
    # when the target is declared, and kept with it in the package cache (a no-op build of
    # 10,000 targets would otherwise walk every attribute of every target again).
    deps: tuple[str, ...] = field(default=None, compare=False)  # type: ignore[assignment]
    # The identity attributes as canonical JSON with a hole per label (targets/identity.py),
    # made with `deps` and kept beside them: None where no template can be exact.
    identity: IdentityTemplate | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.deps is None:
            seen: dict[str, None] = {}
            for name, attr in self.rule.all_attrs.items():
                for label in attr.type.labels(self.attrs[name]):
                    seen.setdefault(label)
            object.__setattr__(self, "deps", tuple(seen))
            template = identity_template(lambda fn: self.map_labels(fn, identity_only=True))
            object.__setattr__(self, "identity", template)

    @property
    def tags(self) -> list[str]:
        return self.attrs["tags"]

    @property
    def resources(self) -> Resources:
        return Resources.from_json(self.attrs["resources"], self.rule.resources)

    def steps_read(self) -> dict[str, tuple[str, int]]:
        """{attribute: (label, step)} for each label attribute read at a step (`StepInput`)."""
        found = {}
        for name, spec in self.rule.step_inputs.items():
            label, step = self.attrs[name], self.attrs[spec.step]
            if label is not None and step is not None:
                found[name] = (label, step)
        return found

    @property
    def inputs(self) -> tuple[str, ...]:
        """What the step reads, as the build graph names it: `deps`, but a label read at a
        step is the name of that kept state (`checkpoint_name`). `deps` keeps the labels
        themselves, the edges `query` and the report show."""
        steps = self.steps_read()
        if not steps:
            return self.deps
        seen: dict[str, None] = {}
        for name, attr in self.rule.all_attrs.items():
            step = steps.get(name)
            for label in attr.type.labels(self.attrs[name]):
                seen.setdefault(label if step is None else checkpoint_name(label, step[1]))
        return tuple(seen)

    def map_labels(self, fn: Callable[[str], str], *, identity_only: bool) -> dict[str, JsonValue]:
        """The attributes with every label replaced by `fn(label)` (by `fn` of the kept
        state's name for a label read at a step); `identity_only`: those of the key."""
        steps = self.steps_read()

        def mapper(name: str) -> Callable[[str], str]:
            if name not in steps:
                return fn
            step = steps[name][1]
            return lambda label: fn(checkpoint_name(label, step))

        return {
            name: attr.type.map_labels(self.attrs[name], mapper(name))
            for name, attr in self.rule.all_attrs.items()
            if not identity_only or (attr.identity and not (attr.omit_default and self.attrs[name] == attr.default))
        }
