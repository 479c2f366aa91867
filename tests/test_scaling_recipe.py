"""The recipe macros of rules/scaling.star, on the suites of experiments/delphi.

Each generated run's FLOPs are recounted by Levanter's own formula (what train_lm logs as
`throughput/total_gflops`) from the model, batch and steps alone, and compared with the
budget it was generated for.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import run_cli
from helpers_workspace import plan

REPO = Path(__file__).resolve().parents[1]
PKG = "//experiments/delphi"
# The vocabulary of each suite's tokenizer: bytes for the CPU suite, a 32k BPE for the full one.
VOCAB = {"fit": 259, "full": 32768}


def _suite(fit: str) -> tuple[dict, dict[str, float]]:
    graph = plan(REPO, f"{PKG}:{fit}")
    target = graph.targets[f"{PKG}:{fit}"]
    return graph.targets, {**target.attrs["runs"], **target.attrs["held_out"]}


def _levanter_flops(attrs: dict, vocab_size: int) -> float:
    from levanter.models.llama import LlamaConfig

    model, trainer = attrs["model"], attrs["trainer"]
    per_token = 3 * LlamaConfig(**model).flops_per_token(vocab_size)
    return per_token * trainer["steps"] * trainer["batch_size"] * model["seq_len"]


@pytest.mark.parametrize("fit", ["fit", "full"])
def test_every_candidate_trains_within_5_percent_of_its_budget(fit: str) -> None:
    targets, runs = _suite(fit)
    assert len(runs) >= 10
    for label, budget in runs.items():
        attrs = targets[label].attrs
        flops = _levanter_flops(attrs, VOCAB[fit])
        assert abs(flops / budget - 1) < 0.05, f"{label}: {flops:.3g} FLOPs for a budget of {budget:.3g}"
        # The name says the budget, width and depth; the description what a dry run shows.
        model = attrs["model"]
        name = re.fullmatch(
            r"(?:full-)?(?:isoflop|heldout)-([0-9.e]+)-d(\d+)-L(\d+)(?:-s\d+)?", label.rpartition(":")[2]
        )
        assert (
            name
            and float(name[1]) == budget
            and (int(name[2]), int(name[3])) == (model["hidden_dim"], model["num_layers"])
        )
        assert (
            f"{attrs['trainer']['steps']} x {attrs['trainer']['batch_size']} x {model['seq_len']}"
            in attrs["description"]
        )
        assert model["hidden_dim"] % model["num_heads"] == 0


def test_the_cpu_suite_forecasts_ten_times_beyond_four_budgets_with_two_seeds() -> None:
    targets, runs = _suite("fit")
    fit = targets[f"{PKG}:fit"].attrs
    budgets = sorted(set(fit["runs"].values()))
    assert len(budgets) >= 4
    for budget in budgets:
        assert sum(1 for b in fit["runs"].values() if b == budget) >= 5
    (held_budget,) = set(fit["held_out"].values())
    assert held_budget >= 10 * budgets[-1]
    seeds = [targets[label].attrs["seed"] for label in fit["held_out"]]
    assert len(seeds) >= 2 and len(set(seeds)) == len(seeds)
    # One batch for every run; a learning rate transferred across widths (x width constant).
    assert {targets[label].attrs["trainer"]["batch_size"] for label in runs} == {8}
    scaled = {
        round(targets[label].attrs["optimizer"]["learning_rate"] * targets[label].attrs["model"]["hidden_dim"], 9)
        for label in runs
    }
    assert len(scaled) == 1
    assert all(targets[label].attrs["model"]["num_layers"] >= 2 for label in runs)


def test_the_full_suite_sweeps_marins_budgets_around_the_prior_optimum() -> None:
    targets, runs = _suite("full")
    fit = targets[f"{PKG}:full"].attrs
    assert sorted(set(fit["runs"].values())) == [3e18, 9e18, 1.8e19, 3e19, 9e19, 1.8e20, 3e20]
    assert sorted(fit["held_out"].values()) == [1e21, 1e22, 1e23]
    assert "manual" in fit["tags"] and all("manual" in targets[label].attrs["tags"] for label in runs)
    for budget in set(fit["runs"].values()):
        widths = sorted(targets[label].attrs["model"]["hidden_dim"] for label, b in fit["runs"].items() if b == budget)
        assert len(widths) == 5
        # Larger budgets: larger models, fewer tokens per FLOP; every learning rate capped.
    held = sorted(fit["held_out"], key=fit["held_out"].get)
    widths = [targets[label].attrs["model"]["hidden_dim"] for label in held]
    assert widths == sorted(widths) and widths[0] < widths[-1]
    assert all(targets[label].attrs["optimizer"]["learning_rate"] <= 0.01 for label in runs)
    assert {targets[label].attrs["resources"]["accelerator"] for label in runs} >= {"v5p-8", "v5p-64"}


def test_dry_run_and_query_over_the_full_suite(tmp_path: Path) -> None:
    rc, out, err = run_cli(REPO, "build", "--dry-run", f"{PKG}:full", store=str(tmp_path / "store"))
    assert rc == 0, err
    assert f"would-run {PKG}:fineweb_edu " in out
    assert re.search(
        r"pending   //experiments/delphi:full-heldout-1e23-d\d+-L\d+ .*\n"
        r" +1e23 FLOPs: d\d+ L\d+ \d+h, [0-9.e]+ non-embedding params, [0-9.e]+ tokens",
        out,
    ), out
    rc, out, err = run_cli(REPO, "query", f"kind(train_lm, deps({PKG}:full))")
    assert rc == 0, err
    assert len(out.split()) == 7 * 5 + 3
    # The wildcard builds the CPU suite (on the tutorial's data) and never the manual full one.
    rc, out, err = run_cli(REPO, "build", "--dry-run", f"{PKG}:all", store=str(tmp_path / "store"))
    assert rc == 0, err
    planned = {line.split()[1] for line in out.splitlines() if line.startswith(("would-run", "pending"))}
    assert {f"{PKG}:fit", f"{PKG}:stdlib_bytes"} <= planned and not any("full" in label for label in planned)
