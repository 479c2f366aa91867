"""Sharded steps, as a rule sees them: units of work over one shard each, and their results.

A sharded rule (`Rule.sharded`) is a *driver*: its impl lists units — each a function of a
`Context` ("module:function", run in a worker process like a SUBPROCESS rule), the files
it reads, and the parameters it reads — hands them to `ctx.map_shards`, and assembles its
own output from their results. Each unit is a step of its own with its own key, made of
the rule's identity, the unit's function and parameters, and the *contents* of its
files (never their names): so adding a file to an input runs only the unit that reads
it, a build killed half-way keeps the units it finished, and changing a parameter reruns
every unit that reads it. The engine (marinbuild/actions/execution/shards.py) looks each key up,
runs what is missing in parallel (locally, or as Ray tasks) and publishes each as an
entry.

A unit's outputs are files in its `ctx.out`; what the driver sums up (counts for a
summary) belongs there too, in a small JSON file, so that it is determined by the unit's
key like everything else in an output (`ctx.measure` is for facts about an attempt).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.targets.attrs import JsonValue


@dataclass(frozen=True)
class ShardUnit:
    """One unit of a sharded step.

    `name` says which part of the input it covers ("train/shard-00003.jsonl"): it labels
    the unit's attempts and errors and names its result, but is not part of its key.
    `files` are what it reads, by the role the unit function knows them by
    (`ctx.location("shard")`); `attrs` the parameters it reads (`ctx.attrs`), JSON values.
    The function sees nothing else of the step: only what its key holds."""

    name: str
    files: Mapping[str, Path]
    attrs: Mapping[str, JsonValue] = field(default_factory=dict)


@dataclass(frozen=True)
class ShardResult:
    """A unit's published outputs: `root` holds them as local files (in place on a local
    store, a verified copy otherwise); `ran` is False when its entry was found."""

    name: str
    key: str
    root: Path
    files: tuple[str, ...]
    ran: bool

    def path(self, name: str) -> Path:
        if name not in self.files:
            raise KeyError(f"shard {self.name} has no output {name!r} (it has {', '.join(self.files) or 'none'})")
        return self.root / name

    def read_json(self, name: str) -> Any:
        return json.loads(self.path(name).read_text())

    def place(self, name: str, destination: Path) -> None:
        """Put the unit's output `name` at `destination` in the driver's output: hard-linked
        where both are on one file system (a local store: no bytes copied), else copied."""
        source = self.path(name)
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, destination)
        except OSError as error:
            if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES):
                raise
            shutil.copyfile(source, destination)
