"""experiments/mixtures, loaded as the repository holds it: the study the issue asks for —
four sources that differ, a target that is no one source, a swarm of at least 16 runs, a
fit, and its proposal trained at the swarm's scale and a larger one beside the references.
Building it takes minutes (bench/mixtures.py, docs/benchmarks.md); the same macros are
built for real at a tiny size in tests/rules/mixtures/test_mixture_swarm.py."""

from __future__ import annotations

from pathlib import Path

from helpers_workspace import loader_for

from marinbuild.actions.analysis.graph import build_graph, expand_patterns
from marinbuild.labels import parse_pattern

REPO = Path(__file__).resolve().parents[2]
PKG = "//experiments/mixtures"


def test_the_study_is_a_swarm_a_fit_and_its_check_at_two_scales() -> None:
    loader = loader_for(REPO)
    graph = build_graph(loader, expand_patterns(loader, [parse_pattern(f"{PKG}:all", "")], ()))
    targets = graph.targets
    rules = {label: target.rule.name for label, target in targets.items()}
    swarm = [label for label in rules if label.startswith(f"{PKG}:swarm-") and rules[label] == "train_lm"]
    assert len(swarm) >= 16
    draws = {targets[label].attrs["mixture"] for label in swarm}
    assert len(draws) == len(swarm) and {rules[draw] for draw in draws} == {"mixture_draw"}
    assert sorted(targets[draw].attrs["draw"] for draw in draws) == list(range(len(swarm)))
    draw = targets[f"{PKG}:swarm-000-mixture"].attrs
    sources = dict(zip(draw["sources"], draw["names"]))
    assert len(sources) >= 3 and all(rules[label] == "tokenize" for label in sources)

    fit = targets[f"{PKG}:law"].attrs
    assert rules[f"{PKG}:law"] == "mixture_fit" and fit["swarm"] == f"{PKG}:swarm"
    evaluated = {label.rpartition(":")[2] for label in targets[f"{PKG}:swarm-000-eval"].attrs["data"]}
    assert set(fit["target"]) <= evaluated
    assert fit["target"] != {sources_name: 1.0 for sources_name in sources.values()}
    assert "curated_tokens" in fit["target"] and f"{PKG}:curated_tokens" not in sources  # no source's

    check = targets[f"{PKG}:check"].attrs
    assert {tuple(role) for role in check["roles"]} == {
        ("swarm", "proposal"),
        ("swarm", "uniform"),
        ("swarm", "prior"),
        ("larger", "proposal"),
        ("larger", "uniform"),
        ("larger", "prior"),
        ("larger", "best_run"),
    }
    small = targets[f"{PKG}:check-swarm-proposal"].attrs
    large = targets[f"{PKG}:check-larger-proposal"].attrs
    tokens = {
        name: attrs["trainer"]["steps"] * attrs["trainer"]["batch_size"] * attrs["model"]["seq_len"]
        for name, attrs in (("small", small), ("large", large))
    }
    assert tokens["large"] >= 2 * tokens["small"] and large["model"]["hidden_dim"] > small["model"]["hidden_dim"]
    assert fit["tokens"] == tokens["large"]  # the proposal keeps under the cap at the larger scale too
    # Offline: every target's data is made here.
    assert "hf_dataset" not in rules.values()
