"""What a build reports: one result per target, and the events a display listens to."""

from __future__ import annotations

import enum
import json
import operator
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class Status(str, enum.Enum):
    BUILT = "built"
    CACHED = "cached"
    FAILED = "failed"
    SKIPPED = "skipped"
    PINNED = "pinned"  # an external artifact: its pinned contents checked, nothing built
    # Dry runs only: what a build would do.
    WOULD_RUN = "would-run"
    PENDING = "pending"
    WOULD_COPY = "would-copy"  # in a mirror in another region: a build copies it (store/mirrors.py)


@dataclass(frozen=True)
class TargetResult:
    label: str
    status: Status
    key: str | None = None
    output: str | None = None
    duration_s: float = 0.0
    reason: str | None = None  # why it ran, was skipped, or failed
    log: Path | None = None  # the attempt's log in the store, for failures
    headline: str | None = None  # the rule's one line about the output of a requested target
    attempt: str | None = None  # the id of the attempt that ran it in this build (built or failed)
    description: str | None = None  # the target's `description`, shown by dry runs (what would run)
    code_changed: bool = False  # cached, but its rule's source changed since (not part of the key)
    estimate: dict | None = None  # a dry run's: what a stale training would cost (targets/compute.py)

    def to_json(self) -> dict:
        found = {
            "label": self.label,
            "key": self.key,
            "status": str.__str__(self.status),  # the member is its value: no enum lookup per target
            "output": self.output,
            "duration_s": round(self.duration_s, 3),
        }
        # The optional fields set one by one, not merged from a dict each: a no-op of
        # 10,000 targets makes 10,000 of these.
        if self.reason:
            found["reason"] = self.reason
        if self.log:
            found["log"] = str(self.log)
        if self.headline:
            found["headline"] = self.headline
        if self.attempt:
            found["attempt"] = self.attempt
        if self.description:
            found["description"] = self.description
        if self.code_changed:
            found["code_changed"] = True
        if self.estimate:
            found["estimate"] = self.estimate
        return found


@dataclass
class BuildResult:
    requested: list[str]
    results: dict[str, TargetResult] = field(default_factory=dict)
    elapsed_s: float = 0.0
    # What a dry run says of the build as a whole, after its targets (the egress its
    # copies would cost against the budget): printed last, and `notes` in its JSON.
    notes: list[str] = field(default_factory=list)
    # `targets_json()` and the results it was made of: the invocation record and `--json`
    # both list every target, and a no-op build of 10,000 serialises them once.
    _targets_json: tuple[list[TargetResult], str] | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def with_targets_json(cls, requested: list[str], results: dict[str, TargetResult], text: str) -> BuildResult:
        """Results whose `targets_json()` is `text` already (a no-op certificate's)."""
        made = cls(requested, results)
        made._targets_json = (list(results.values()), text)
        return made

    @property
    def counts(self) -> dict[str, int]:
        counted = Counter(result.status for result in self.results.values())
        return {
            status.value: counted.get(status, 0)
            for status in Status
            if counted.get(status) or status in _ALWAYS_COUNTED
        }

    @property
    def ok(self) -> bool:
        return not any(result.status in (Status.FAILED, Status.SKIPPED) for result in self.results.values())

    def to_json(self) -> dict:
        notes = {"notes": self.notes} if self.notes else {}
        return {"targets": [result.to_json() for result in self.results.values()], "counts": self.counts, **notes}

    def targets_json(self) -> str:
        """The JSON array of every target's result (`json.dumps` of `to_json()["targets"]`),
        made again only if the results changed since it was last asked for."""
        current = list(self.results.values())
        if self._targets_json is not None:
            made_from, text = self._targets_json
            if len(made_from) == len(current) and all(map(operator.is_, made_from, current)):
                return text
        text = json.dumps([result.to_json() for result in current])
        self._targets_json = (current, text)
        return text

    def to_json_text(self) -> str:
        """`to_json()` as text a person can read and a program can parse: one line per
        target (a no-op build of 10,000 targets prints them in a few milliseconds, where
        an indented dump takes a fifth of a second). One `json.dumps` of the whole list,
        which costs half of one per target, then a line break before each target: a
        target's object begins `{"label": `, and `}, {"label": ` appears nowhere else (a
        quote inside a string is escaped)."""
        targets = self.targets_json()[1:-1]
        lines = targets.replace('}, {"label": ', '},\n    {"label": ')
        notes = f',\n  "notes": {json.dumps(self.notes)}' if self.notes else ""
        return f'{{\n  "targets": [\n    {lines}\n  ],\n  "counts": {json.dumps(self.counts)}{notes}\n}}'


def pending_json(labels: list[str]) -> str:
    """`json.dumps([{"label": label, "key": None, "status": "pending"} for label in labels])`,
    the targets of the record a build writes first thing, made from one `json.dumps` of the
    labels (a no-op of 10,000 targets would spend more on the dicts than on the rest of its
    record): `", "` is found in that text only between two labels, a quote inside a
    string being escaped."""
    if not labels:
        return "[]"
    tail = ', "key": null, "status": "pending"}'
    joined = json.dumps(labels)[1:-1].replace('", "', f'"{tail}, {{"label": "')
    return f'[{{"label": {joined}{tail}]'


_ALWAYS_COUNTED = (Status.BUILT, Status.CACHED, Status.FAILED, Status.SKIPPED)


class Reporter(Protocol):
    """Receives build events; the CLI renders them live (rich) or as plain lines."""

    def build_started(self, total: int) -> None: ...

    def step_started(self, label: str) -> None: ...

    def step_progress(self, label: str, done: float, total: float | None, unit: str) -> None: ...

    def step_finished(self, result: TargetResult) -> None: ...

    def step_log(self, label: str, line: str) -> None:
        """A line of a step's log running elsewhere (the lease holder this builder waits for)."""

    def warning(self, message: str) -> None: ...

    def build_finished(self, result: BuildResult) -> None: ...


class NullReporter:
    """For commands that plan or probe without showing progress."""

    def build_started(self, total: int) -> None:
        pass

    def step_started(self, label: str) -> None:
        pass

    def step_progress(self, label: str, done: float, total: float | None, unit: str) -> None:
        pass

    def step_finished(self, result: TargetResult) -> None:
        pass

    def step_log(self, label: str, line: str) -> None:
        pass

    def warning(self, message: str) -> None:
        pass

    def build_finished(self, result: BuildResult) -> None:
        pass
