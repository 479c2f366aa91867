"""An isoFLOP sweep through the CLI: tiny runs train to their budgets as Levanter counts
them, and adding a budget reruns only the new runs and the fit.

Kept small for CI: one d16 candidate per budget, a handful of steps; the fit itself is
tested on synthetic data (test_scaling_fit.py), on a tiny trained suite (test_report.py)
and on the CPU suite (docs/delphi.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import build_json, run_cli, statuses
from helpers_lm import sweep_workspace

PKG = "//exp"
TRAIN_TIMEOUT_S = 600


def _build_file(budgets: list[float]) -> str:
    return f"""
load("//rules/scaling:scaling.star", "isoflop_sweep", "scaling_recipe")
python_corpus(name = "corpus", sample_count = 60, chunk_characters = 1500, validation_fraction = 0.1)
bpe_tokenizer(name = "tokenizer", data = ":corpus", vocab_size = 300)
tokenize(name = "tokens", data = ":corpus", tokenizer = ":tokenizer")
recipe = scaling_recipe(
    vocab_size = 300, seq_len = 64, widths = [16, 32], head_dim = 16,
    depth_base = 32, depth_log_slope = 0, depth_offset = 0,
    target_steps = 4, min_batch = 2, max_batch = 4, max_eval_batches = 1,
)
runs = isoflop_sweep(name = "iso", budgets = {budgets!r}, candidates_per_budget = 1, data = ":tokens", \
recipe = recipe, evaluate = False)
fit_scaling_law(name = "fit", runs = runs, bootstrap = 10)
"""


def test_adding_a_budget_reruns_only_its_runs_and_the_fit(tmp_path: Path) -> None:
    ws = sweep_workspace(tmp_path / "ws", _build_file([1e8, 2e8]))
    runs = [f"{PKG}:iso-1e8-d16-L1", f"{PKG}:iso-2e8-d16-L1"]
    rc, out, err = run_cli(ws, "build", "--json", *runs, timeout=TRAIN_TIMEOUT_S)
    assert rc == 0, f"{out}\n{err}"
    for item in json.loads(out)["targets"]:
        if item["label"] in runs:
            summary = json.loads((Path(item["output"]) / "summary.json").read_text())
            budget = 1e8 if "1e8" in item["label"] else 2e8
            # The recipe's FLOP count is Levanter's: the run measured its budget.
            assert abs(summary["flops"] / budget - 1) < 0.05, summary
            assert summary["eval_loss"] is not None

    # Everything is built but the fit, whose inputs are all known: its key is computable.
    dry = statuses(build_json(ws, "--dry-run", f"{PKG}:all"))
    assert dry == {
        **{label: "cached" for label in runs},
        f"{PKG}:corpus": "cached",
        f"{PKG}:tokenizer": "cached",
        f"{PKG}:tokens": "cached",
        f"{PKG}:fit": "would-run",
    }

    (ws / "exp" / "BUILD.marin").write_text(_build_file([1e8, 2e8, 4e8]))
    dry = statuses(build_json(ws, "--dry-run", f"{PKG}:all"))
    (new,) = set(dry) - set(runs) - {f"{PKG}:{name}" for name in ("corpus", "tokenizer", "tokens", "fit")}
    assert new.startswith(f"{PKG}:iso-4e8-")
    assert dry == {
        **{label: "cached" for label in runs},
        f"{PKG}:corpus": "cached",
        f"{PKG}:tokenizer": "cached",
        f"{PKG}:tokens": "cached",
        new: "would-run",
        f"{PKG}:fit": "pending",
    }


# Runs whose summaries a genrule writes (budgets 1e9 and 1e10, three token counts each, on
# a parabola): the fit's inputs without training, so its step is checked in seconds.
def _summary_rule(name: str, budget: float, tokens: float, loss: float) -> str:
    summary = json.dumps({"tokens": tokens, "flops": budget, "eval_loss": loss, "parameter_count": 1000})
    return f"genrule(name = {name!r}, outs = ['summary.json'], cmd = {f'echo {summary!r} > $@'!r})\n"


def _fit_build_file() -> str:
    rules, runs = [], {}
    for budget, centre, floor in ((1e9, 6.0, 3.0), (1e10, 6.5, 2.7), (1e11, 7.0, 2.45)):
        for offset in (-0.5, -0.2, 0.1, 0.4):
            name = f"run-{budget:.0e}-{offset:+.1f}"
            rules.append(_summary_rule(name, budget, 10 ** (centre + offset), floor + 0.3 * offset**2))
            runs[f":{name}"] = budget
    return (
        "".join(rules) + f"fit_scaling_law(name = 'fit', runs = {runs!r}, target_budgets = [1e12], bootstrap = 200)\n"
    )


def test_the_fit_step_publishes_the_same_bytes_when_rebuilt(tmp_path: Path) -> None:
    """fit.json and its plots are a pure function of the runs: rebuilt from an empty store,
    and rerun aside by `rerun --check`, the step writes the same bytes."""
    ws = sweep_workspace(tmp_path / "ws", _fit_build_file())
    trees = []
    for store in ("store-1", "store-2"):
        data = build_json(ws, f"{PKG}:fit", store=str(tmp_path / store))
        trees.append(
            {path.name: path.read_bytes() for path in Path(data["by_label"][f"{PKG}:fit"]["output"]).iterdir()}
        )
    assert set(trees[0]) >= {"fit.json", "isoflops.png", "scaling.png"} and trees[0] == trees[1]
    fit = json.loads(trees[0]["fit.json"])
    assert fit["loss_law"]["E"] > 0 and all(budget["minimum_inside"] for budget in fit["budgets"])
    key = data["by_label"][f"{PKG}:fit"]["key"]
    rc, out, err = run_cli(ws, "rerun", "--check", key, store=str(tmp_path / "store-2"))
    assert rc == 0 and "matches the stored output" in out, f"{out}\n{err}"
