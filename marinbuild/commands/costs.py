"""What the stale steps of a build would cost in accelerator-hours, before anything runs:
each stale training's estimate (targets/compute.py), their total, and the refusal of a
build past `--max-accelerator-hours`.

Stale means what a dry run says would run or waits on what would (`would-run`,
`pending`): a cached training costs nothing, and a cap set in a script's `build` line
stops only the builds that would spend.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from marinbuild.actions.analysis.graph import Graph
from marinbuild.actions.bookkeeping.results import BuildResult, Status
from marinbuild.errors import ComputeOverBudget
from marinbuild.targets.compute import Estimate, Utilisation, estimate, hours_text

_STALE = (Status.WOULD_RUN, Status.PENDING)
_LARGEST_SHOWN = 5


def stale_estimates(graph: Graph, result: BuildResult, utilisation: Utilisation) -> dict[str, Estimate]:
    """{label: estimate} of each stale step whose rule declares its FLOPs, in build order."""
    found = {}
    for label, item in result.results.items():
        target = graph.targets.get(label)
        if item.status in _STALE and target is not None:
            estimated = estimate(target, graph.targets.get, utilisation)
            if estimated is not None:
                found[label] = estimated
    return found


def total_line(estimates: Mapping[str, Estimate]) -> str | None:
    """The line a dry run ends with: the stale trainings' accelerator-hours, by kind, and
    those it could not estimate."""
    if not estimates:
        return None
    by_kind: dict[str, float] = defaultdict(float)
    for item in estimates.values():
        if item.accelerator is not None and item.hours is not None:
            by_kind[item.accelerator] += item.hours
    kinds = ", ".join(f"{kind} {hours_text(hours)}" for kind, hours in sorted(by_kind.items()))
    unknown = sum(1 for item in estimates.values() if item.hours is None)
    count = len(estimates)
    line = (
        f"estimated: {hours_text(sum(by_kind.values()))} accelerator-hours for {count} stale training"
        f"{'s' if count != 1 else ''}" + (f" ({kinds})" if kinds else "")
    )
    return line + (f"; {unknown} not estimated (see each)" if unknown else "")


def check_budget(estimates: Mapping[str, Estimate], most_hours: float | None) -> None:
    """Refuse (exit 2) when the estimated accelerator-hours exceed `most_hours`, naming the
    largest stale steps; a step that could not be estimated counts as none, and is named."""
    if most_hours is None:
        return
    total = sum(item.hours or 0.0 for item in estimates.values())
    if total <= most_hours:
        return
    largest = sorted(estimates.items(), key=lambda pair: -(pair[1].hours or 0.0))[:_LARGEST_SHOWN]
    shown = "; ".join(f"{label}: {item.describe()}" for label, item in largest)
    more = f" (and {len(estimates) - len(largest)} more)" if len(estimates) > len(largest) else ""
    unknown = [label for label, item in estimates.items() if item.hours is None]
    raise ComputeOverBudget(
        f"the stale steps would take an estimated {hours_text(total)} accelerator-hours, more than "
        f"--max-accelerator-hours {most_hours:g}; the largest: {shown}{more}"
        + (f"; not estimated: {', '.join(unknown)}" if unknown else ""),
        hint="build fewer targets, raise the cap, or set the utilisation you measure "
        "(--utilisation, the workspace's 'utilisation' setting)",
    )
