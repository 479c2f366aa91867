"""Loss curves as inline SVG, drawn with matplotlib.

One figure overlays every run: a colour per run, training loss solid, evaluation loss
dashed with markers (dotted: one evaluation set of several). Text stays text
(`svg.fonttype: none`), so the legend is readable and searchable; the hash salt is fixed
so that the same metrics give the same bytes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TRAIN_LOSS = "train/loss"
EVAL_LOSS = "eval/loss"
_MAX_POINTS = 2000  # per curve: more only makes the page heavier
_LEGEND_ROWS = 10


@dataclass(frozen=True)
class Curve:
    run: str  # the run's label
    metric: str  # e.g. train/loss, eval/loss
    steps: list[int]
    values: list[float]


def loss_curves(run: str, rows: Sequence[dict[str, Any]]) -> list[Curve]:
    """A run's training and evaluation loss from its metrics.jsonl rows, and the loss of
    each evaluation set (`eval/<set>/loss`) when there are several: with one set, that
    series is the overall evaluation loss again."""
    names = {name for row in rows for name in row}
    per_set = sorted(
        name for name in names if name.startswith("eval/") and name.endswith("/loss") and name != EVAL_LOSS
    )
    wanted = [name for name in (TRAIN_LOSS, EVAL_LOSS) if name in names] + (per_set if len(per_set) > 1 else [])
    curves = []
    for name in wanted:
        points = [(row["step"], float(row[name])) for row in rows if isinstance(row.get(name), (int, float))]
        if points:
            curves.append(Curve(run, name, [step for step, _ in points], [value for _, value in points]))
    return curves


def curves_svg(curves: Sequence[Curve], title: str) -> str:
    """One <svg> element with every curve; a run keeps its colour across its metrics."""
    import matplotlib
    from matplotlib.figure import Figure

    runs = list(dict.fromkeys(curve.run for curve in curves))
    palette = matplotlib.colormaps["tab10"]
    with matplotlib.rc_context(
        {"svg.fonttype": "none", "svg.hashsalt": "marinbuild-report", "font.family": "sans-serif"}
    ):
        figure = Figure(figsize=(8, 4.2), layout="constrained")
        axes = figure.add_subplot()
        for curve in curves:
            train = curve.metric == TRAIN_LOSS
            stride = max(1, len(curve.steps) // _MAX_POINTS)  # a long run's curve, thinned; its last point kept
            steps, values = curve.steps[::-stride][::-1], curve.values[::-stride][::-1]
            axes.plot(
                steps,
                values,
                color=palette(runs.index(curve.run) % 10),
                linestyle="-" if train else "--" if curve.metric == EVAL_LOSS else ":",
                marker=None if train else "o",
                markersize=4,
                linewidth=1.6,
                label=f"{curve.run} {curve.metric}",
            )
        axes.set_xlabel("step")
        axes.set_ylabel("loss")
        axes.set_title(title)
        axes.grid(alpha=0.3)
        if len(curves) <= _LEGEND_ROWS:
            axes.legend(fontsize=8)
        else:  # a sweep's many runs: the legend below the plot, which keeps its size
            figure.set_figheight(4.2 + 0.16 * -(-len(curves) // 3))
            figure.legend(loc="outside lower center", ncols=3, fontsize=7)
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.find("<svg") :]
