"""The plots of `fit_scaling_law`, drawn from the contents of fit.json alone (matplotlib, Agg)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
import numpy as np  # noqa: E402
from matplotlib import ticker  # noqa: E402

# No software version or date in the files: the same fit draws the same bytes.
_METADATA = {"Software": None}


def isoflops(fit: dict[str, Any], path: Path) -> None:
    """Loss vs tokens, one colour per budget: the runs, the fitted parabola, its minimum."""
    figure, axes = plt.subplots(figsize=(7, 5))
    colours = plt.cm.viridis(np.linspace(0, 0.9, len(fit["budgets"])))
    for colour, budget in zip(colours, fit["budgets"]):
        runs = [run for run in fit["runs"] if run["budget"] == budget["budget"]]
        axes.scatter([run["tokens"] for run in runs], [run["loss"] for run in runs], color=colour, zorder=3)
        low, high = budget["log10_tokens_range"]
        x = np.linspace(low - 0.1, high + 0.1, 100)
        p = budget["parabola"]
        style = "-" if budget["minimum_inside"] else "--"
        axes.plot(10**x, p["a"] * x**2 + p["b"] * x + p["c"], style, color=colour, label=f"C = {budget['budget']:.2g}")
        if budget["optimal_tokens"] is not None and budget["used"]:
            axes.scatter(
                [budget["optimal_tokens"]],
                [budget["optimal_loss"]],
                marker="*",
                s=160,
                color=colour,
                edgecolor="black",
                zorder=4,
            )
    _held_out(axes, fit["held_out"], "tokens", "loss", lambda run: f"held out, C = {run['budget']:.2g}")
    axes.set_xscale("log")
    _sparse_minor_labels(axes.xaxis)
    axes.set_xlabel("training tokens")
    axes.set_ylabel("eval loss (nats/token)")
    axes.set_title("IsoFLOP curves (dashed: minimum outside the sweep; star: optimum)")
    axes.legend(fontsize=8)
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120, metadata=_METADATA)
    plt.close(figure)


def scaling(fit: dict[str, Any], path: Path) -> None:
    """Optimal tokens and optimal loss vs compute: the fitted laws, their forecasts with
    95% intervals, and the held-out runs."""
    used = [budget for budget in fit["budgets"] if budget["used"]]
    forecasts = fit["forecasts"]
    span = [budget["compute"] for budget in used] + [forecast["budget"] for forecast in forecasts]
    c = np.logspace(math.log10(min(span)) - 0.2, math.log10(max(span)) + 0.2, 200)
    tokens_law, loss_law = fit["tokens_law"], fit["loss_law"]

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    left.plot(
        c,
        tokens_law["A"] * c ** tokens_law["alpha"],
        color="tab:blue",
        label=f"D* = {tokens_law['A']:.3g} C^{tokens_law['alpha']:.3f}",
    )
    left.scatter(
        [budget["compute"] for budget in used],
        [budget["optimal_tokens"] for budget in used],
        color="tab:blue",
        zorder=3,
        label="isoFLOP optima",
    )
    _forecast_bars(left, forecasts, "optimal_tokens", "optimal_tokens_ci")
    _held_out(left, fit["held_out"], "flops", "tokens", lambda run: f"held-out run ({run['tokens_ratio']:.2f}x D*)")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("compute C (FLOPs)")
    left.set_ylabel("loss-optimal tokens D*")
    left.set_title("Compute-optimal tokens")

    right.plot(
        c,
        loss_law["E"] + loss_law["B"] * c ** -loss_law["beta"],
        color="tab:green",
        label=f"L* = {loss_law['E']:.3f} + {loss_law['B']:.3g} C^-{loss_law['beta']:.3f}",
    )
    right.scatter(
        [budget["compute"] for budget in used],
        [budget["optimal_loss"] for budget in used],
        color="tab:green",
        zorder=3,
        label="isoFLOP optima",
    )
    _forecast_bars(right, forecasts, "loss", "loss_ci")
    for run in fit["held_out"]:
        right.scatter([run["flops"]], [run["loss"]], marker=".", s=40, color="crimson", zorder=4)
    for check in fit.get("held_out_budgets", []):
        runs = [run for run in fit["held_out"] if run["budget"] == check["budget"]]
        seeds = f", mean of {len(runs)} seeds" if len(runs) > 1 else ""
        right.scatter(
            [math.exp(sum(math.log(run["flops"]) for run in runs) / len(runs))],
            [check["loss"]],
            marker="D",
            color="crimson",
            zorder=4,
            label=f"held-out ({100 * check['relative_error']:+.2f}%{seeds})",
        )
    right.set_xscale("log")
    right.set_yscale("log")  # a pure power law is a straight line
    right.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.0)))
    right.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    right.yaxis.set_minor_formatter(ticker.NullFormatter())
    right.set_xlabel("compute C (FLOPs)")
    right.set_ylabel("optimal eval loss L*")
    right.set_title("Loss vs compute, with forecasts (95% intervals)")
    for axes in (left, right):
        axes.legend(fontsize=8)
        axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120, metadata=_METADATA)
    plt.close(figure)


def _sparse_minor_labels(axis: Any) -> None:
    """Minor ticks of a log axis labelled at 2 and 5 only: less than a decade wide, the
    axis still has labels; a little wider, they do not run into each other."""
    axis.set_minor_locator(ticker.LogLocator(subs=(2.0, 5.0)))
    axis.set_minor_formatter(ticker.LogFormatterSciNotation(labelOnlyBase=False, minor_thresholds=(10, 10)))


def _forecast_bars(axes: Any, forecasts: list[dict[str, Any]], value: str, interval: str) -> None:
    budgets = [forecast["budget"] for forecast in forecasts]
    values = [forecast[value] for forecast in forecasts]
    errors = None
    if all(forecast[interval] is not None for forecast in forecasts):
        errors = np.array([[v - f[interval][0], f[interval][1] - v] for v, f in zip(values, forecasts)]).T.clip(min=0)
    axes.errorbar(
        budgets, values, yerr=errors, fmt="o", mfc="white", color="black", capsize=4, zorder=3, label="forecast"
    )


def _held_out(axes: Any, runs: list[dict[str, Any]], x: str, y: str, label: Callable[[dict[str, Any]], str]) -> None:
    """Each held-out run as a red diamond, each budget's label once."""
    labelled = set()
    for run in runs:
        axes.scatter(
            [run[x]],
            [run[y]],
            marker="D",
            color="crimson",
            zorder=4,
            label=None if run["budget"] in labelled else label(run),
        )
        labelled.add(run["budget"])
