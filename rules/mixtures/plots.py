"""The plots of a mixture study, drawn from fit.json (and validation.json, once the proposal
and the references are trained) alone, so that a step draws them from what it wrote and a
reader can redraw them. Matplotlib with the Agg backend, and no software version or date in
the files: the same numbers draw the same bytes, and a rebuild changes no digest.

`swarm` and `predicted` are drawn by mixture_fit (without validation) and again by
mixture_check (with it); `validation` only by mixture_check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

from rules.mixtures.check import SWARM_SCALE  # noqa: E402

# No software version or date in the files: the same fit draws the same bytes.
_METADATA = {"Software": None}
# A role's marker and colour, the same in every plot; a role check.py does not know yet gets _OTHER.
_ROLE_STYLE = {
    "proposal": ("*", "tab:red"),
    "uniform": ("s", "tab:gray"),
    "prior": ("D", "tab:green"),
    "best_run": ("^", "tab:blue"),
}
_OTHER = ("P", "tab:purple")
SWARM_COLUMNS = 4  # the swarm plot's panels a row: a swarm of many sources wraps rather than widens


def _text(value: Any) -> str:
    """A name from the files as matplotlib text: a `$` would otherwise start mathtext (and
    an unbalanced one fail the plot)."""
    return str(value).replace("$", r"\$")


def _role(role: str) -> str:
    return _text(role.replace("_", " "))


def _style(role: str) -> tuple[str, str]:
    return _ROLE_STYLE.get(role, _OTHER)


def _swarm_scale(validation: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The validation at the swarm's scale, or {} when there is none (yet)."""
    scales = (validation or {}).get("scales", [])
    return next((scale for scale in scales if scale.get("scale") == SWARM_SCALE), {})


def _save(figure: Any, path: Path) -> None:
    figure.savefig(path, dpi=110, metadata=_METADATA)
    plt.close(figure)


def _interval_bar(interval: Sequence[float] | None, value: float) -> list[list[float]] | None:
    """An errorbar's [[below], [above]] of `value` for a [low, high] interval, or None."""
    if not interval:
        return None
    return [[max(value - interval[0], 0.0)], [max(interval[1] - value, 0.0)]]


def swarm(fit: Mapping[str, Any], validation: Mapping[str, Any] | None, path: Path) -> None:
    """A panel per source: each swarm run's target loss against that source's weight; the
    best run highlighted; the proposal at its predicted loss (with its interval); and, once
    trained at the swarm's scale, the proposal's and the references' actual losses."""
    names, runs, best, proposal = fit["sources"], fit["runs"], fit["best_run"], fit["proposal"]
    trained = {role: run for role, run in _swarm_scale(validation).get("runs", {}).items() if role != "best_run"}
    columns = min(len(names), SWARM_COLUMNS)
    rows = -(-len(names) // columns)
    figure, panels = plt.subplots(
        rows, columns, figsize=(3.4 * columns, 0.6 + 3.4 * rows), sharey=True, squeeze=False, layout="constrained"
    )
    for unused in panels.flat[len(names) :]:
        unused.set_visible(False)
    for index, (name, axes) in enumerate(zip(names, panels.flat)):
        axes.scatter(
            [run["weights"][index] for run in runs],
            [run["loss"] for run in runs],
            s=16,
            color="black",
            label="swarm run",
        )
        axes.scatter(
            [best["weights"][name]],
            [best["loss"]],
            marker="^",
            s=90,
            color="tab:blue",
            edgecolor="black",
            zorder=3,
            label=f"best run ({_text(best['run'])})",
        )
        axes.errorbar(
            [proposal["weights"][name]],
            [proposal["predicted"]],
            yerr=_interval_bar(proposal.get("interval"), proposal["predicted"]),
            fmt="*",
            markersize=13,
            mfc="white",
            color="tab:red",
            capsize=3,
            zorder=3,
            label="proposal, predicted",
        )
        for role, run in trained.items():
            marker, colour = _style(role)
            axes.scatter(
                [run["weights"][name]],
                [run["loss"]],
                marker=marker,
                s=90,
                color=colour,
                edgecolor="black",
                zorder=4,
                label=f"{_role(role)}, trained",
            )
        axes.set_title(_text(name), fontsize=10)
        axes.set_xlabel(f"weight of {_text(name)}")
        axes.grid(True, alpha=0.3)
    for axes in panels[:, 0]:
        axes.set_ylabel("target loss (nats/token)")
    figure.legend(*panels[0][0].get_legend_handles_labels(), loc="outside lower center", ncols=3, fontsize=8)
    figure.suptitle(f"The swarm: {len(runs)} runs' target loss against each source's weight", fontsize=11)
    _save(figure, path)


def predicted(fit: Mapping[str, Any], validation: Mapping[str, Any] | None, path: Path) -> None:
    """The law's prediction against each swarm run's actual loss, fitted on every run and
    without the run itself (leave-one-out); the line where they agree; and, once trained at
    the swarm's scale, each validation run's predicted loss against its actual one."""
    runs = fit["runs"]
    actual = [run["loss"] for run in runs]
    figure, axes = plt.subplots(figsize=(6, 5.5), layout="constrained")
    axes.scatter(actual, [run["predicted"] for run in runs], s=18, color="black", label="swarm run, fitted on all")
    axes.scatter(
        actual,
        [run["loo_predicted"] for run in runs],
        s=30,
        facecolor="none",
        edgecolor="tab:orange",
        label="swarm run, left out of the fit",
    )
    points = actual + [run["predicted"] for run in runs] + [run["loo_predicted"] for run in runs]
    at_scale = _swarm_scale(validation)
    for role, guess in at_scale.get("predicted", {}).items():
        run = at_scale.get("runs", {}).get(role)
        if run is None:
            continue
        marker, colour = _style(role)
        interval = fit["proposal"].get("interval") if role == "proposal" else None
        axes.errorbar(
            [run["loss"]],
            [guess],
            yerr=_interval_bar(interval, guess),
            fmt=marker,
            markersize=10,
            color=colour,
            mec="black",
            capsize=3,
            zorder=4,
            label=f"{_role(role)}, trained at the swarm's scale",
        )
        points += [run["loss"], guess]
    low, high = min(points), max(points)
    margin = 0.05 * (high - low or 1.0)
    line = [low - margin, high + margin]
    axes.plot(line, line, "--", color="gray", linewidth=1, label="predicted = actual")
    axes.set_xlabel("actual target loss (nats/token)")
    axes.set_ylabel("predicted target loss (nats/token)")
    error = fit.get("loo", {}).get("mean_relative_error")
    shown = f", leave-one-out error {100 * error:.2f}%" if isinstance(error, (int, float)) else ""
    axes.set_title(f"{_text(fit['regression'])}: predicted against actual{shown}", fontsize=10)
    axes.legend(fontsize=7)
    axes.grid(True, alpha=0.3)
    _save(figure, path)


def _verdict(scale: Mapping[str, Any]) -> str:
    if "holds" not in scale:
        return "no proposal trained"
    return "the proposal's advantage holds" if scale["holds"] else "the proposal's advantage does not hold"


def validation(checked: Mapping[str, Any], path: Path) -> None:
    """A panel per scale: each trained mixture's actual target loss as a bar (its value on
    it), the swarm scale's predictions as black ticks, and in the title whether the proposal
    beats every reference there."""
    scales = checked["scales"]
    figure, panels = plt.subplots(1, len(scales), figsize=(4.4 * len(scales), 4.2), squeeze=False, layout="constrained")
    for scale, axes in zip(scales, panels[0]):
        roles = list(scale["runs"])
        losses = [scale["runs"][role]["loss"] for role in roles]
        bars = axes.bar(range(len(roles)), losses, color=[_style(role)[1] for role in roles], width=0.7)
        axes.bar_label(bars, labels=[f"{loss:.4f}" for loss in losses], label_type="center", color="white", fontsize=8)
        guesses = scale.get("predicted", {})
        shown = [(position, guesses[role]) for position, role in enumerate(roles) if role in guesses]
        for index, (position, guess) in enumerate(shown):
            axes.hlines(
                guess,
                position - 0.35,
                position + 0.35,
                color="black",
                linewidth=2,
                label="predicted" if index == 0 else None,
            )
        values = losses + [guess for _, guess in shown]
        spread = max(values) - min(values) or 0.05 * max(values) or 0.1
        axes.set_ylim(min(values) - spread, max(values) + 0.6 * spread)  # the losses differ in their last digits
        axes.set_xticks(range(len(roles)), [_role(role) for role in roles], rotation=15)
        axes.set_ylabel("target loss (nats/token)")
        tokens = scale.get("run_tokens")
        size = f", {tokens:,} tokens a run" if isinstance(tokens, int) else ""
        axes.set_title(f"{_text(scale['scale'])} scale{size}:\n{_verdict(scale)}", fontsize=9)
        if shown:
            axes.legend(fontsize=7)
        axes.grid(True, axis="y", alpha=0.3)
    _save(figure, path)
