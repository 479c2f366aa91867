"""The recipe macros of rules/scaling/scaling.star, on the suites of experiments/delphi.

Each generated run's FLOPs are recounted by Levanter's own formula (what train_lm logs as
`throughput/total_gflops`) from the model, batch and steps alone, and compared with the
budget it was generated for.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import run_cli
from helpers_workspace import assert_bad_input, build, error_line, plan, store_is_untouched

REPO = Path(__file__).resolve().parents[3]
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


# -- mixtures of experts ------------------------------------------------------------------------

MOE_BUILD = """
load("//rules/lm:lm.star", "llama_nano", "mixtral_nano")
load("//rules/scaling:scaling.star", "isoflop_sweep", "scaling_recipe")
python_corpus(name = "corpus", sample_count = 60, chunk_characters = 1500, validation_fraction = 0.1)
bpe_tokenizer(name = "tokenizer", data = ":corpus", vocab_size = 300)
tokenize(name = "tokens", data = ":corpus", tokenizer = ":tokenizer")
shape = dict(vocab_size = 300, seq_len = 64, widths = [32, 64, 128, 256], head_dim = 16, target_steps = 10,
             min_batch = 1, max_batch = 64)
isoflop_sweep(name = "dense", budgets = [1e13, 1e14], candidates_per_budget = 3, data = ":tokens",
              recipe = scaling_recipe(**shape), evaluate = False)
isoflop_sweep(name = "moe", budgets = [1e13, 1e14], candidates_per_budget = 3, data = ":tokens",
              recipe = scaling_recipe(experts = 8, experts_per_token = 2, **shape), evaluate = False)
isoflop_sweep(name = "wide", budgets = [1e13, 1e14], candidates_per_budget = 3, data = ":tokens",
              recipe = scaling_recipe(experts = 64, experts_per_token = 2, **shape), evaluate = False)
train_lm(name = "nano", data = ":tokens", model = llama_nano(), trainer = {"steps": 2})
train_lm(name = "nano_moe", data = ":tokens", model = mixtral_nano(), trainer = {"steps": 2})
"""


def _moe_flops(attrs: dict, vocab_size: int) -> float:
    from rules.common.levanter.configs import CONFIG_CLASSES

    model, trainer = attrs["model"], attrs["trainer"]
    config = CONFIG_CLASSES[model.get("family", "llama")](
        **{name: value for name, value in model.items() if name not in ("family", "activation_function")}
    )
    return 3 * config.flops_per_token(vocab_size) * trainer["steps"] * trainer["batch_size"] * model["seq_len"]


def _recipe_workspace(ws: Path, build_file: str) -> Path:
    """A workspace of the ML rules whose package exp holds `build_file`, with the macros."""
    for star in ("lm/lm.star", "scaling/scaling.star"):
        (ws / "rules" / star).parent.mkdir(parents=True)
        (ws / "rules" / star).write_text((REPO / "rules" / star).read_text())
    (ws / "exp").mkdir()
    (ws / "exp" / "BUILD.marin").write_text(build_file)
    (ws / "marinbuild.toml").write_text(
        'rules = ["rules.data.decls", "rules.tokenize.decls", "rules.lm.decls", "rules.scaling.decls"]\n'
    )
    return ws


def test_a_mixture_of_experts_recipe_counts_the_flops_of_its_active_experts(tmp_path: Path) -> None:
    ws = _recipe_workspace(tmp_path / "ws", MOE_BUILD)
    targets = plan(ws, "//exp:all").targets
    runs = {
        label: target.attrs
        for label, target in targets.items()
        if target.rule.name == "train_lm" and "nano" not in label
    }
    by_sweep = {
        sweep: {label: attrs for label, attrs in runs.items() if f":{sweep}-" in label}
        for sweep in ("dense", "moe", "wide")
    }
    assert all(len(sweep) == 6 for sweep in by_sweep.values())

    for label, attrs in runs.items():
        # Levanter's own count (MixtralConfig.flops_per_token for the mixtures) lands on the budget.
        budget = float(re.search(r"-(1e1[34])-", label)[1])
        assert abs(_moe_flops(attrs, 300) / budget - 1) < 0.05, label
    for label, attrs in {**by_sweep["moe"], **by_sweep["wide"]}.items():
        model = attrs["model"]
        assert (model["family"], model["num_experts_per_tok"]) == ("mixtral", 2)
        assert label.endswith(f"-e{model['n_routed_experts']}k2")
        assert (
            "active (" in attrs["description"]
            and f"{model['n_routed_experts']} experts, 2 per token" in attrs["description"]
        )

    # Eight times the experts, two per token either way: the same widths chosen by the prior
    # (it counts active parameters), about the same tokens at each (the FLOPs per token differ
    # only by the router's). Two experts per token cost more than a dense MLP as wide as one:
    # fewer tokens for the same budget.
    def tokens(sweep: str) -> dict[tuple[str, int], int]:
        return {
            (re.search(r"-(1e1[34])-", label)[1], attrs["model"]["hidden_dim"]): attrs["trainer"]["steps"]
            * attrs["trainer"]["batch_size"]
            for label, attrs in by_sweep[sweep].items()
        }

    moe, wide, dense = tokens("moe"), tokens("wide"), tokens("dense")

    # mixtral_nano: llama_nano's FLOPs per token, and its router's (under 1% more).
    nano, nano_moe = (_moe_flops(targets[f"//exp:{name}"].attrs, 300) for name in ("nano", "nano_moe"))
    assert 0 < nano_moe - nano < 0.01 * nano
    assert moe.keys() == wide.keys()
    for run, count in moe.items():
        assert abs(wide[run] / count - 1) < 0.1, run
        assert wide[run] <= count
    assert all(moe[run] < dense[run] for run in moe.keys() & dense.keys()) and moe.keys() & dense.keys()


# -- values out of range ------------------------------------------------------------------------

RANGES_BUILD = """\
load("//rules/scaling:scaling.star", "isoflop_sweep", "scaling_recipe")
filegroup(name = "tokens")
shape = dict(vocab_size = 300, seq_len = 64, widths = [32, 64, 128, 256], head_dim = 16, target_steps = 10,
             min_batch = 1, max_batch = 64)
isoflop_sweep(name = "sweep", budgets = [1e13], candidates_per_budget = 2, data = ":tokens",
              recipe = scaling_recipe(**dict(shape, {fields})), evaluate = False)
"""


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        # The recipe's own numbers: where the recipe is made, at the BUILD line that calls the macro.
        ("lr_constant = -0.33", "scaling_recipe: field 'lr_constant': expected > 0, got -0.33"),
        ("max_learning_rate = 0", "scaling_recipe: field 'max_learning_rate': expected > 0, got 0"),
        ("head_dim = 0", "scaling_recipe: field 'head_dim': expected >= 1, got 0"),
        ("widths = [0, 64]", "scaling_recipe: field 'widths': expected >= 1, got 0"),
        ("seq_len = -64", "scaling_recipe: field 'seq_len': expected >= 1, got -64"),
        ("min_batch = 0", "scaling_recipe: field 'min_batch': expected >= 1, got 0"),
        ("target_steps = 0", "scaling_recipe: field 'target_steps': expected > 0, got 0"),
        ("experts = 4, experts_per_token = 5", "scaling_recipe: experts_per_token (5) is more than experts (4)"),
        ("min_batch = 64, max_batch = 8", "scaling_recipe: max_batch (8) is below min_batch (64)"),
        # What it adds to each run's optimizer: train_lm's ranges, at the same line.
        (
            'optimizer = {"learning_rate": -3e-3}',
            "attribute 'optimizer': field 'learning_rate': expected > 0, got -0.003",
        ),
        ('optimizer = {"beta2": 1.0}', "attribute 'optimizer': field 'beta2': expected in [0, 1), got 1.0"),
        ('optimizer = {"weight_decay": -0.1}', "attribute 'optimizer': field 'weight_decay': expected >= 0, got -0.1"),
    ],
)
def test_a_recipe_value_out_of_range_fails_at_the_build_line_that_uses_it(
    tmp_path: Path, fields: str, message: str
) -> None:
    ws = _recipe_workspace(tmp_path / "ws", RANGES_BUILD.format(fields=fields))
    result = build(ws, "//exp:all")
    assert result.rc == 2 and "Traceback" not in result.stderr, result.stderr
    error = error_line(result.stderr)
    assert store_is_untouched(ws)
    if message.startswith("scaling_recipe"):
        assert re.fullmatch(
            rf"marinbuild: error: rules/scaling/scaling\.star:\d+:\d+: fail: {re.escape(message)} "
            r"\(in a macro called at exp/BUILD\.marin:6\)",  # the line of scaling_recipe(...)
            error,
        ), error
    else:
        # The train_lm target is declared by isoflop_sweep, at its line.
        assert error.startswith("marinbuild: error: exp/BUILD.marin:5: train_lm 'sweep-1e13-d") and error.endswith(
            message
        ), error


FIT_BUILD = """\
load("//rules/scaling:scaling.star", "isoflop_sweep", "scaling_recipe")
filegroup(name = "tokens")
shape = dict(vocab_size = 300, seq_len = 64, widths = [32, 64, 128, 256], head_dim = 16, target_steps = 10,
             min_batch = 1, max_batch = 64)
runs = isoflop_sweep(name = "sweep", budgets = [1e13, 1e14], candidates_per_budget = 2, data = ":tokens",
                     recipe = scaling_recipe(**shape), evaluate = False)
"""


@pytest.mark.parametrize(
    ("attribute", "value", "message"),
    [
        ("huber_delta", "0", "expected > 0, got 0"),
        ("noise_floor", "-0.01", "expected >= 0, got -0.01"),
        ("bootstrap", "-1", "expected >= 0, got -1"),
    ],
)
def test_a_fit_s_number_out_of_range_fails_at_its_line(
    tmp_path: Path, attribute: str, value: str, message: str
) -> None:
    fit = f'fit_scaling_law(name = "fit", runs = runs, {attribute} = {value})\n'
    ws = _recipe_workspace(tmp_path / "ws", FIT_BUILD + fit)
    assert_bad_input(
        build(ws, "//exp:fit"), ws, "exp/BUILD.marin", 7, f"fit_scaling_law 'fit': attribute '{attribute}': {message}"
    )


# -- the two counts of non-embedding parameters ---------------------------------------------------

# Every shape the counts differ on: width, heads, grouped queries, a head size of its own, the
# MLP's width, depth, and a mixture of experts with and without a shared one.
SHAPES = [
    dict(hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, intermediate=intermediate, **extra)
    for hidden, heads in ((32, 2), (64, 4), (96, 8))
    for kv_heads in (1, heads)
    for layers, intermediate in ((1, None), (3, 5 * hidden))
    for extra in ({}, {"head_dim": 8}, {"head_dim": 24})
]
MOE = [dict(experts=experts, experts_per_token=2, shared_experts=shared) for experts, shared in ((4, 0), (8, 1))]
PARAMS_BUILD = """
load("//rules/lm:lm.star", "llama", "mixtral")
load("//rules/scaling:scaling.star", "non_embedding_params")
SHAPES = {shapes}
MOE = {moe}
# A Mixtral has no head size of its own (its layers never read the field).
moes = [mixtral(**dict(shape, **moe)) for shape in SHAPES if "head_dim" not in shape for moe in MOE]
models = [llama(**shape) for shape in SHAPES] + moes
for index, model in enumerate(models):
    config = {{"model": model, "params": non_embedding_params(model)}}
    py_step(name = "m%d" % index, fn = "steps.py:run", config = config)
"""


def test_the_recipes_and_the_fit_count_non_embedding_parameters_alike(tmp_path: Path) -> None:
    """scaling.star counts a recipe's parameters (its prior, the runs' descriptions), the fit
    counts a run's from its model.json (rules/scaling/runs.py): the same count, whatever the
    shape, a head size of its own included."""
    from rules.common import lm_config
    from rules.scaling.runs import non_embedding_params

    build_file = PARAMS_BUILD.format(shapes=repr(SHAPES), moe=repr(MOE))
    ws = _recipe_workspace(tmp_path / "ws", build_file)
    (ws / "exp" / "steps.py").write_text("def run(ctx):\n    pass\n")
    targets = plan(ws, "//exp:all").targets
    assert len(targets) == len(SHAPES) + len([shape for shape in SHAPES if "head_dim" not in shape]) * len(MOE)
    for label, target in targets.items():
        model, counted = target.attrs["config"]["model"], target.attrs["config"]["params"]
        assert counted == non_embedding_params(lm_config.resolve("model", model)), label
