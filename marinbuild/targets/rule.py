"""The rules API: what a step kind declares, and the targets a BUILD file instantiates.

A rule is plain data plus an `impl(ctx)` function. Rule modules must stay cheap to
import — loading BUILD files imports them — so heavy libraries (jax, levanter) are
imported inside `impl`.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from marinbuild.errors import Location
from marinbuild.labels import Label
from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.identity import IdentityTemplate, identity_template
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
    """A kind of step. Bump `version` when a change of `impl` should rebuild old outputs."""

    name: str
    impl: Callable[[Context], None]
    attrs: Mapping[str, Attr]
    version: int = 1
    doc: str = ""
    resources: Resources = Resources()
    resumable: bool = False
    # The implementation reads its inputs through `ctx.url(label)` (fsspec, tensorstore):
    # on a remote store nothing is downloaded for it, and `ctx.files(label)` is an error.
    reads_urls: bool = False
    retry: RetryPolicy = RetryPolicy()
    # True: the impl runs once per host of a multi-host request (TPU slice, GPU hosts), each
    # process seeing `ctx.distributed`; False: a request for several hosts is refused.
    multi_host: bool = False
    execution: Execution = Execution.THREAD
    # Distributions whose versions are recorded in each output's provenance (e.g. "jax").
    packages: tuple[str, ...] = ()
    # True: a target of this rule names data that exists already (`external`): it never
    # runs, and its output is what `marinbuild pin` recorded in marinbuild.lock.
    pinned: bool = False
    # Environment variables the step is given besides the allow-list ("NAME": passed from
    # the builder's environment; "NAME=value": set). Recorded in each attempt, not in the key.
    env: tuple[str, ...] = ()
    # Checks across attributes at load time; raises ValueError so the error names the BUILD line.
    validate: Callable[[Mapping[str, JsonValue]], None] | None = None
    # Files outside the workspace the step reads, by a stable name (e.g. the interpreter's
    # standard library): their content digests enter the key, hashed through the stat
    # cache like source files, so the key follows their content and never their location.
    external_inputs: Callable[[Mapping[str, JsonValue]], Mapping[str, Path]] | None = None
    # One line about an output (e.g. its final loss), printed after a build that names the
    # target. It reads the output directory, so it must be cheap; None when there is nothing to say.
    headline: Callable[[Path], str | None] | None = None
    # Modules `impl` imports lazily that are part of the implementation: their source counts
    # in the rule's code digest (marinbuild explain reports code changed since an output).
    code_modules: tuple[str, ...] = ()
    # A JSON file among the outputs holding the step's summary metrics (e.g. "summary.json"),
    # shown by `marinbuild show` and returned by `marinbuild.metrics()`.
    metrics_file: str | None = None
    # For a rule that evaluates a model: the numbers of its metrics file by what was evaluated,
    # {data set or task: {metric: value}} ("a+b" for a number over several). `compare` and the
    # report name each `eval.<what>.<metric>`, so that evaluations of the same data share a column
    # whichever target made them; the engine never reads the metrics file's layout itself.
    evaluated: Callable[[Mapping[str, Any]], Mapping[str, Mapping[str, Any]]] | None = None
    # For a step whose bytes are not reproducible (training): `rerun --check` compares these
    # metrics, each within its relative tolerance, instead of the output bytes.
    check_metrics: Mapping[str, float] | None = None
    # For a resumable rule: given the files of a key's scratch space (paths relative to it)
    # and a function reading one (its bytes, None if absent), where a new attempt would
    # resume, in words ("the checkpoint at step 10"); None: from the start. `build`, `build
    # --dry-run` and `explain` say so.
    resume_point: Callable[[Sequence[str], ReadScratch], str | None] | None = None
    # For a rule whose steps pass through states worth keeping (train_lm's checkpoints): the
    # attribute listing the steps a target keeps. Each kept state is its own entry, under a
    # key derived from the target's key and the step (`keys.checkpoint_recipe`), published
    # as soon as the running step reaches it (`ctx.publish_checkpoint`). The implementation
    # also puts its files under `checkpoint_dir(step)` of the output: when the step ends, a
    # state not yet published is published from there, and `checkpoints/` is left out of
    # the output, so a kept state is stored once, in its entry. Other targets read it by
    # `step_inputs`.
    keeps_checkpoints: str | None = None
    # Label attributes that, with a step attribute set, read one kept state of the target
    # they name instead of its whole output: `eval_lm(model = ":run", step = 2000)`.
    step_inputs: Mapping[str, StepInput] = field(default_factory=dict)
    # True: `impl` is a driver that maps units of work over the shards of its inputs
    # (`ctx.map_shards`, targets/shards.py), each under a key of its own. It only
    # orchestrates, so it runs in the builder, whatever the executor; the units run in
    # worker processes here, or as Ray tasks with `--executor ray`.
    sharded: bool = False
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


def import_impl(path: str) -> Callable[[Context], None]:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


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
