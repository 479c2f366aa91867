"""Where an attempt ran: the machines its attempt record names, so that a team can find
the host of a slow or failed run.

The builder's own name is in every record (`host`, build_provenance.py), but a step built
with `--executor ray` runs elsewhere: on a Ray node, with the accelerators Ray gave it. So
an attempt also records its `executor` (`local`, `ray`) and `ran_on`, one `Machine` per
host of the step (several for a multi-host step, in rank order). A sharded step's units
may run on many nodes: its record lists each distinct one once, with how many of its
units ran there (`units`), however many units it has. Records written before these
fields existed have neither, and read as they did.
"""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Machine:
    """One machine an attempt ran on. `accelerators` is what the executor gave the attempt
    there, by resource name (`{"GPU": 1.0}`; empty on a Ray node that gave none; None where
    the executor does not say, as on this machine); `accelerator_type` the kind the node
    has (`H100`, `TPU-V5P`)."""

    host: str
    ip: str | None = None
    node_id: str | None = None
    accelerator_type: str | None = None
    accelerators: tuple[tuple[str, float], ...] | None = None
    units: int | None = None  # of a sharded step: how many of its units ran here

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"host": self.host}
        for name in ("ip", "node_id", "accelerator_type", "units"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        if self.accelerators is not None:
            data["accelerators"] = dict(self.accelerators)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Machine:
        accelerators = data.get("accelerators")
        return cls(
            str(data.get("host", "?")),
            data.get("ip"),
            data.get("node_id"),
            data.get("accelerator_type"),
            None if accelerators is None else tuple(sorted(accelerators.items())),
            data.get("units"),
        )

    def describe(self, short: bool = False) -> str:
        """`vm`, or for a Ray node `10.0.0.7 (node 5f1c…, host worker-3), 1 GPU H100`
        (`short`: the node id cut to 12 characters)."""
        if self.node_id is None and self.ip is None:
            text = self.host
        else:
            node = self.node_id[:12] if short and self.node_id else self.node_id
            text = f"{self.ip or '?'} (" + (f"node {node}, " if node else "") + f"host {self.host})"
        if self.accelerators is not None:
            given = ", ".join(f"{amount:g} {name}" for name, amount in self.accelerators)
            kind = f" {self.accelerator_type}" if given and self.accelerator_type else ""
            text += f", {given}{kind}" if given else ", no accelerator"
        if self.units is not None:
            text += f", {self.units:,} unit{'s' if self.units != 1 else ''}"
        return text


def this_machine() -> Machine:
    """The builder's machine, where a local executor runs every attempt."""
    return Machine(socket.gethostname())


def tally(counts: Counter[Machine]) -> list[Machine]:
    """Each distinct machine once with how many units ran there (`units`), the busiest
    first: where a sharded step's units ran, in as many lines as nodes, not units."""
    return [replace(machine, units=count) for machine, count in counts.most_common()]


def ran_on(record: Mapping[str, Any]) -> list[Machine]:
    """The machines an attempt record (or an entry's provenance) names; none in a record
    written before they were recorded."""
    return [Machine.from_json(item) for item in record.get("ran_on") or ()]


def where_text(record: Mapping[str, Any], short: bool = False) -> str | None:
    """Where an attempt ran, in one line (`ray: 10.0.0.7 (node …), 1 GPU H100; …`); None for
    a record written before it was recorded, which is shown as before (its `host`)."""
    machines, executor = ran_on(record), record.get("executor")
    if not machines:  # an old record; or a step the cluster never placed, or whose task was lost
        return None if executor is None else f"{executor}: no machine recorded"
    listed = "; ".join(machine.describe(short) for machine in machines)
    return f"{executor}: {listed}" if executor else listed
