"""The mixture study's plots and report sections, from hand-made fit.json and validation.json
of the shapes fit.py and check.py write: real matplotlib (a PNG, the same bytes for the same
numbers) and real HTML (every run, mixture and role shown, hostile names escaped, nothing
shown for a missing or malformed file), with or without the optional parts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from marinbuild.targets.html_blocks import number
from marinbuild.targets.outputs import StepOutputs
from rules.mixtures import plots
from rules.mixtures.report import check_section, fit_section

PNG = b"\x89PNG\r\n\x1a\n"
# An HTML tag and an unbalanced mathtext expression: the report must escape the one and the plots draw the other.
SOURCES = ["web", "<b>x</b>", "code$_{$"]
WEIGHTS = [
    [0.6, 0.3, 0.1],
    [0.2, 0.5, 0.3],
    [0.1, 0.1, 0.8],
    [0.4, 0.4, 0.2],
    [0.3, 0.2, 0.5],
    [0.5, 0.1, 0.4],
]
PROPOSAL = {"web": 0.7113, "<b>x</b>": 0.2552, "code$_{$": 0.0335}


def _loss(weights: list[float]) -> float:
    return 3.0 - 0.5 * weights[0] + 0.3 * weights[2]


def _mixture(weights: list[float]) -> dict[str, float]:
    return dict(zip(SOURCES, weights))


def _fit(interval: bool = True) -> dict[str, Any]:
    runs = [
        {
            "run": f"swarm-{index:03d}",
            "weights": weights,
            "loss": _loss(weights),
            "predicted": _loss(weights) + 0.004,
            "loo_predicted": _loss(weights) - 0.011,
        }
        for index, weights in enumerate(WEIGHTS)
    ]
    errors = {"rmse": 0.011, "mean_relative_error": 0.0039, "max_relative_error": 0.0052}
    return {
        "regression": "log_linear",
        "parameters": {"set_a": {"form": "c + exp(sum_j t_j w_j)", "c": 2.1, "t": [-1.5, 0.1, 0.4]}},
        "target": {"set_a": 1.0},
        "sources": SOURCES,
        "labels": [f"//exp:{index}_tokens" for index in range(3)],
        "source_tokens": {name: 100_000 for name in SOURCES},
        "swarm_tokens": 10_000,
        "runs": runs,
        "loo": errors,
        "compared": {"log_linear": errors, "lightgbm": {**errors, "rmse": 0.031}},
        "proposal": {
            "weights": PROPOSAL,
            "predicted": 2.6431,
            "interval": [2.6012, 2.6987] if interval else None,
            "repetition": {name: 0.5 * weight for name, weight in PROPOSAL.items()},
        },
        "best_run": {
            "run": "swarm-000",
            "mixture": "//exp:swarm-000-mixture",
            "weights": _mixture(WEIGHTS[0]),
            "loss": _loss(WEIGHTS[0]),
            "predicted": _loss(WEIGHTS[0]) + 0.004,
        },
        "prior": {"weights": _mixture([0.5, 0.25, 0.25]), "predicted": 2.83},
        "uniform": {"weights": _mixture([1 / 3] * 3), "predicted": 2.93},
        "caps": {name: 4.0 for name in SOURCES},
        "run_tokens": 10_000,
        "max_repetition": 4.0,
        "kl_weight": 0.0,
    }


def _validation(fit: dict[str, Any], larger: bool = True) -> dict[str, Any]:
    def trained(role: str, loss: float) -> dict[str, Any]:
        return {"weights": fit[role]["weights"], "loss": loss, "evaluation": f"//exp:{role}-eval"}

    swarm = {
        "scale": "swarm",
        "run_tokens": 10_000,
        "runs": {
            "proposal": trained("proposal", 2.6517),
            "uniform": trained("uniform", 2.9412),
            "prior": trained("prior", 2.8177),
            "best_run": {**trained("best_run", fit["best_run"]["loss"]), "evaluation": "swarm-000"},
        },
        "predicted": {role: fit[role]["predicted"] for role in ("proposal", "uniform", "prior", "best_run")},
        "prediction_error": (2.6431 - 2.6517) / 2.6517,
        "proposal_beats": {"uniform": True, "prior": True, "best_run": True},
        "holds": True,
    }
    scales = [swarm]
    if larger:
        larger_runs = {"proposal": trained("proposal", 2.4461), "uniform": trained("uniform", 2.4302)}
        scales.append(
            {
                "scale": "larger",
                "run_tokens": 40_000,
                "runs": larger_runs,
                "proposal_beats": {"uniform": False},
                "holds": False,
            }
        )
    return {"target": fit["target"], "regression": fit["regression"], "scales": scales}


def test_each_plot_is_a_png_and_the_same_numbers_draw_the_same_bytes(tmp_path: Path) -> None:
    fit, bare = _fit(), _fit(interval=False)
    checked = _validation(fit)
    draws = {
        "swarm": lambda path: plots.swarm(fit, checked, path),
        "swarm-before-validation": lambda path: plots.swarm(bare, None, path),
        "predicted": lambda path: plots.predicted(fit, checked, path),
        "predicted-before-validation": lambda path: plots.predicted(bare, None, path),
        "validation": lambda path: plots.validation(checked, path),
        "validation-swarm-scale-only": lambda path: plots.validation(_validation(bare, larger=False), path),
    }
    drawn = {}
    for name, draw in draws.items():
        first, second = tmp_path / f"{name}-1.png", tmp_path / f"{name}-2.png"
        draw(first)
        draw(second)
        drawn[name] = first.read_bytes()
        assert drawn[name].startswith(PNG) and len(drawn[name]) > 10_000, name
        assert drawn[name] == second.read_bytes(), name
    assert drawn["swarm"] != drawn["swarm-before-validation"]  # the trained mixtures are on it
    assert drawn["predicted"] != drawn["predicted-before-validation"]


def _step(files: dict[str, Any]) -> StepOutputs:
    """What the report read of a step: each file as JSON (bytes as they are) and one plot."""
    data = {name: value if isinstance(value, bytes) else json.dumps(value).encode() for name, value in files.items()}
    return StepOutputs("//exp:<mixture>", "step.html", data, (("swarm.png", PNG),))


def _assert_escaped(html: str) -> None:
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
    assert "//exp:&lt;mixture&gt;" in html and "<mixture>" not in html


def test_the_fit_section_shows_the_law_its_error_the_proposal_and_every_run() -> None:
    fit = _fit()
    html = fit_section(_step({"fit.json": fit}))
    assert html is not None
    _assert_escaped(html)
    assert "data:image/png;base64," in html
    assert "log_linear (fitted)" in html and "<td>lightgbm</td>" in html
    assert "c + exp(sum_j t_j w_j)" in html and "&lt;b&gt;x&lt;/b&gt;: 0.1" in html  # the law's t, by source
    assert all(number(weight) in html for weight in PROPOSAL.values())
    assert "2.643 [2.601, 2.699] (bootstrap interval)" in html
    assert "best run (swarm-000)" in html and "<td>prior</td>" in html and "<td>uniform</td>" in html
    assert "<td>repetition</td>" in html and "<td>cap</td>" in html
    assert all(f"<td>{run['run']}</td>" in html for run in fit["runs"])

    bare = fit_section(_step({"fit.json": _fit(interval=False)}))
    assert bare is not None and "2.643" in bare and "bootstrap interval" not in bare


@pytest.mark.parametrize(
    "files",
    [
        {},
        {"fit.json": b"{not json"},
        {"fit.json": [1, 2]},
        {"fit.json": {"regression": "log_linear", "sources": SOURCES, "runs": []}},
        {"fit.json": {**_fit(), "runs": "swarm-000"}},
    ],
    ids=["missing", "not-json", "not-a-dict", "no-proposal", "runs-not-a-list"],
)
def test_the_fit_section_shows_nothing_without_a_fit(files: dict[str, Any]) -> None:
    assert fit_section(_step(files)) is None


def test_the_mixture_page_sets_each_trained_mixture_against_its_prediction() -> None:
    fit = _fit()
    html = check_section(_step({"validation.json": _validation(fit)}))
    assert html is not None
    _assert_escaped(html)
    assert "data:image/png;base64," in html
    assert "swarm scale (10,000 tokens a run)" in html and "larger scale (40,000 tokens a run)" in html
    for role in ("proposal", "uniform", "prior", "best run"):
        assert f"<td>{role}</td>" in html
    assert all(number(weight) in html for weight in PROPOSAL.values())
    assert number((2.6431 - 2.6517) / 2.6517) in html  # the proposal's relative error at the swarm scale
    assert "The proposal beats uniform: yes, prior: yes, best run: yes. Its advantage <b>holds</b>" in html
    assert "The proposal beats uniform: no. Its advantage <b>does not hold</b>" in html
    assert "off by -0.32%" in html


def test_the_mixture_page_of_the_swarm_scale_alone() -> None:
    html = check_section(_step({"validation.json": _validation(_fit(interval=False), larger=False)}))
    assert html is not None
    assert "swarm scale" in html and "larger scale" not in html
    assert html.count("<b>holds</b>") == 1 and "does not hold" not in html


@pytest.mark.parametrize(
    "files",
    [
        {},
        {"validation.json": b"\x00"},
        {"validation.json": [1, 2]},
        {"validation.json": {"target": {"set_a": 1.0}}},
        {"validation.json": {"scales": [{"scale": "swarm", "runs": ["proposal"]}]}},
    ],
    ids=["missing", "not-json", "not-a-dict", "no-scales", "runs-not-a-dict"],
)
def test_the_mixture_page_shows_nothing_without_a_validation(files: dict[str, Any]) -> None:
    assert check_section(_step(files)) is None
