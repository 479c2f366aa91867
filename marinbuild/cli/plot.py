"""Loss curves in a terminal: one text panel per metric, a symbol per run.

`marinbuild compare --curves` draws them where no browser is at hand (an SSH session, a
CI log); `--curves --csv` gives the numbers for a plotting tool instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from marinbuild.provenance.compare import Curve

_SYMBOLS = "123456789abcdefghijklmnopqrstuvwxyz"
WIDTH = 72
HEIGHT = 16


def plot_lines(curves: Sequence[Curve], width: int = WIDTH, height: int = HEIGHT) -> list[str]:
    """A panel per metric (train/loss, eval/loss), each run's curve drawn with its symbol,
    then the legend."""
    runs = list(dict.fromkeys((curve.run, curve.key) for curve in curves))
    symbol = {run: _SYMBOLS[index % len(_SYMBOLS)] for index, run in enumerate(runs)}
    lines: list[str] = []
    for metric in dict.fromkeys(curve.metric for curve in curves):
        shown = [curve for curve in curves if curve.metric == metric and curve.steps]
        lines += _panel(metric, shown, {id(curve): symbol[(curve.run, curve.key)] for curve in shown}, width, height)
        lines.append("")
    keyed = len({run for run, _key in runs}) < len(runs)  # a label with several outputs (--history)
    lines += [f"  {symbol[run]}  {run[0]}" + (f"  ({run[1][:12]})" if keyed else "") for run in runs]
    return lines


def _panel(metric: str, curves: Sequence[Curve], symbols: dict[int, str], width: int, height: int) -> list[str]:
    steps = [step for curve in curves for step in curve.steps]
    values = [value for curve in curves for value in curve.values if math.isfinite(value)]
    if not steps or not values:
        return [f"{metric}: no values"]
    x0, x1 = min(steps), max(steps)
    y0, y1 = min(values), max(values)
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    grid = [[" "] * width for _ in range(height)]
    for curve in curves:
        for column in range(width):
            x = x0 + (x1 - x0) * column / (width - 1) if width > 1 else x0
            y = _at(curve, x)
            if y is None or not math.isfinite(y):
                continue
            row = round((y1 - y) / (y1 - y0) * (height - 1))
            cell = grid[row][column]
            grid[row][column] = symbols[id(curve)] if cell in (" ", symbols[id(curve)]) else "*"
    labels = {0: f"{y1:.4g}", height // 2: f"{(y0 + y1) / 2:.4g}", height - 1: f"{y0:.4g}"}
    margin = max(len(text) for text in labels.values()) + 1
    lines = [f"{metric} (by step)"]
    lines += [f"{labels.get(index, ''):>{margin}}|{''.join(row)}" for index, row in enumerate(grid)]
    lines.append(f"{'':>{margin}}+{'-' * width}")
    lines.append(f"{'':>{margin}} {x0:<{width // 2}}{x1:>{width - width // 2}}")
    return lines


def _at(curve: Curve, x: float) -> float | None:
    """The curve's value at step `x` (linear between its points), None outside them."""
    steps, values = curve.steps, curve.values
    if x < steps[0] or x > steps[-1]:
        return None
    for index in range(1, len(steps)):
        if x <= steps[index]:
            left, right = steps[index - 1], steps[index]
            share = 0.0 if right == left else (x - left) / (right - left)
            return values[index - 1] + share * (values[index] - values[index - 1])
    return values[-1]
