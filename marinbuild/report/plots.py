"""Loss curves and histograms as inline SVG, drawn with matplotlib.

One figure overlays every run: a colour per run, and a line style per curve as the run's
rule declares its curves (`Rule.curves`): the first solid (training loss), the others
dashed with markers (evaluation loss), one evaluation set of several dotted. A
distribution a step cut on is a histogram with its threshold as a line. Text stays text (`svg.fonttype: none`), so
the legend is readable and searchable; the hash salt is fixed so that the same metrics
give the same bytes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from marinbuild.targets.distributions import Distribution
from marinbuild.targets.outputs import Curves

_MAX_POINTS = 2000  # per curve: more only makes the page heavier
_LEGEND_ROWS = 10  # more curves than this: a key of runs and one of curves, below the plot
_LEGEND_FONT_PT = 7
_LEGEND_CHARACTERS = 64
_FIGURE_WIDTH_IN = 8
# Text kept as text, and a fixed hash salt: the same numbers give the same bytes.
_SETTINGS = {"svg.fonttype": "none", "svg.hashsalt": "marinbuild-report", "font.family": "sans-serif"}


@dataclass(frozen=True)
class Curve:
    run: str  # the run's label
    metric: str  # e.g. train/loss, eval/loss
    steps: list[int]
    values: list[float]
    line: str = "--"  # matplotlib's line style: "-" solid, "--" dashed, ":" dotted


def run_curves(run: str, rows: Sequence[dict[str, Any]], declared: Curves | None) -> list[Curve]:
    """A run's curves among the rows of its declared curves file, and the curve of each
    evaluation set when there are several: with one set, it is the overall one again."""
    if declared is None:
        return []
    lines = {metric: "-" if index == 0 else "--" for index, metric in enumerate(declared.metrics)}
    return [
        Curve(run, metric, steps, values, lines.get(metric, ":"))
        for metric, steps, values in declared.series(rows, every_set=True)
    ]


def _line_style(line: str) -> dict[str, Any]:
    """A solid line plain; the others with markers."""
    return {"linestyle": line, "marker": None if line == "-" else "o"}


def curves_svg(curves: Sequence[Curve], title: str) -> str:
    """One <svg> element with every curve; a run keeps its colour across its metrics."""
    import matplotlib
    from matplotlib.figure import Figure

    runs = list(dict.fromkeys(curve.run for curve in curves))
    palette = matplotlib.colormaps["tab10" if len(runs) <= 10 else "tab20"]
    colours = {run: palette(index % palette.N) for index, run in enumerate(runs)}
    with matplotlib.rc_context(_SETTINGS):
        figure = Figure(figsize=(_FIGURE_WIDTH_IN, 4.2), layout="constrained")
        axes = figure.add_subplot()
        for curve in curves:
            stride = max(1, len(curve.steps) // _MAX_POINTS)  # a long run's curve, thinned; its last point kept
            steps, values = curve.steps[::-stride][::-1], curve.values[::-stride][::-1]
            axes.plot(
                steps,
                values,
                color=colours[curve.run],
                markersize=4,
                linewidth=1.6,
                label=f"{curve.run} {curve.metric}",
                **_line_style(curve.line),
            )
        axes.set_xlabel("step")
        axes.set_ylabel("loss")
        axes.set_title(title)
        axes.grid(alpha=0.3)
        if len(curves) <= _LEGEND_ROWS:
            axes.legend(fontsize=8)
        else:
            _key_below(figure, colours, {curve.metric: curve.line for curve in curves})
        return _svg(figure)


def _key_below(figure: Any, colours: dict[str, Any], lines: dict[str, str]) -> None:
    """A sweep's many curves (8 runs of 4 curves each): a key of colours, a run each, and one of
    line styles, a curve each, below the plot, in as many columns as its longest label lets
    fit across the figure, so that every entry shows whole, however many runs there are."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colour, linewidth=1.6) for colour in colours.values()]
    handles += [
        Line2D([], [], color="#455a64", linewidth=1.6, markersize=4, **_line_style(line)) for line in lines.values()
    ]
    labels = [_shortened(text) for text in (*colours, *lines)]
    # A character of the legend's font is at most about 0.62 of its size; the line and the
    # spaces around an entry take some 40 points.
    entry_pt = 0.62 * _LEGEND_FONT_PT * max(len(label) for label in labels) + 40
    columns = max(1, min(len(labels), int((_FIGURE_WIDTH_IN * 72 - 24) // entry_pt)))
    figure.set_figheight(4.2 + 0.2 * -(-len(labels) // columns))
    figure.legend(handles, labels, loc="outside lower center", ncols=columns, fontsize=_LEGEND_FONT_PT)


def _shortened(label: str) -> str:
    """A legend label of at most _LEGEND_CHARACTERS, cut in the middle (a long package path)."""
    if len(label) <= _LEGEND_CHARACTERS:
        return label
    half = (_LEGEND_CHARACTERS - 1) // 2
    return f"{label[:half]}…{label[-half:]}"


# -- distributions ----------------------------------------------------------------------------


def histogram_svg(cut: Distribution) -> str:
    """One <svg> element: the histogram of what a step cut on, the threshold a dashed line."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_SETTINGS):
        figure = Figure(figsize=(6, 2.6), layout="constrained")
        axes = figure.add_subplot()
        axes.stairs(cut.counts, cut.edges, fill=True, color="#90a4ae", label=f"{cut.count:,} values")
        if cut.threshold is not None:
            axes.axvline(cut.threshold, color="#c62828", linestyle="--", linewidth=1.6, label=cut.cut())
        axes.set_xlabel(cut.name)
        axes.set_ylabel("count")
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
        return _svg(figure)


def _svg(figure: Any) -> str:
    """The figure as one <svg> element (within the settings' context: they apply when saving)."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.find("<svg") :]
