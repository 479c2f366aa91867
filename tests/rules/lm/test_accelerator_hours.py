"""What a training would cost before it runs: a dry run estimates each stale train_lm's
accelerator-hours from its FLOPs (rules/common/flops.py) and the chips it asks for
(marinbuild/targets/compute.py), and totals them; `--max-accelerator-hours` refuses a build
past it before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli
from helpers_lm import lm_workspace
from helpers_workspace import error_line, plan, store_is_untouched

from marinbuild.targets.compute import estimate, hours_text

BUILD = """
load("//rules/lm:lm.star", "gpu", "llama", "tpu")
python_corpus(name = "corpus", sample_count = 60, chunk_characters = 1500, validation_fraction = 0.1)
bpe_tokenizer(name = "tokenizer", data = ":corpus", vocab_size = 300)
tokenize(name = "tokens", data = ":corpus", tokenizer = ":tokenizer")
train_lm(
    name = "small",
    data = ":tokens",
    model = llama(hidden = 64, layers = 2, heads = 4, seq_len = 128),
    trainer = {"steps": 100, "batch_size": 8},
    resources = tpu("v5p-8"),
)
train_lm(
    name = "large",
    data = ":tokens",
    model = llama(hidden = 4096, layers = 32, heads = 32, seq_len = 4096),
    trainer = {"steps": 10000, "batch_size": 256},
    resources = gpu("H100", 8, hosts = 4),
)
"""

# :small by hand, as Levanter counts a Llama's FLOPs per token (lm_flops_per_token) with
# hidden h = 64, 2 layers, 4 heads of 16, 4 KV heads, MLP 4h = 256, sequences s = 128, and
# the tokenizer's 300 tokens:
MLP = 2 * 3 * 64 * 256  # 98,304: gate, up and down projections
QKV = 2 * 64 * (4 * 16 + 2 * 4 * 16)  # 24,576
DENSE = 2 * 64 * 64  # 8,192: the output projection
ATTENTION = (2 * 128 * 128 * 4 * 16 + 3 * 128 * 128 * 4 + 2 * 128 * 128 * 16 * 4) // 128  # 34,304 a token
LM_HEAD = 2 * 64 * 300  # 38,400
PER_TOKEN = 3 * (2 * (MLP + QKV + DENSE + ATTENTION) + LM_HEAD)  # 1,107,456: forward and backward
SMALL_FLOPS = 100 * 8 * 128 * PER_TOKEN  # 100 steps of 8 sequences: 113,403,494,400
# On a v5p-8 (4 chips of 459 TFLOP/s dense bf16) at the default 40% utilisation:
SMALL_HOURS = SMALL_FLOPS / (459e12 * 0.4) / 3600  # 1.7157e-7 chip-hours


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lm_workspace(tmp_path_factory.mktemp("costs") / "ws", BUILD)


def test_the_estimate_of_a_known_config_is_its_hand_computation(ws: Path) -> None:
    assert PER_TOKEN == 1_107_456 and SMALL_FLOPS == 113_403_494_400
    graph = plan(ws, "//exp:small")
    found = estimate(graph.targets["//exp:small"], graph.targets.get)
    assert found is not None
    assert found.flops == SMALL_FLOPS
    assert (found.accelerator, found.chips, found.utilisation) == ("v5p", 4, 0.4)
    assert found.hours == pytest.approx(SMALL_HOURS, rel=1e-12)


def test_a_dry_run_prints_each_stale_training_s_estimate_and_their_total(ws: Path) -> None:
    rc, out, err = run_cli(ws, "build", "--dry-run", "//exp:all")
    assert rc == 0, err
    lines = out.splitlines()
    small = lines.index(next(line for line in lines if line.startswith("pending   //exp:small")))
    assert lines[small + 1].strip() == (
        "estimate: 1.13e+11 FLOPs on 4 v5p chips at 40% utilisation: 1.72e-07 accelerator-hours (4.29e-08 h)"
    )
    large = estimate(*_large(ws)).hours  # type: ignore[union-attr]
    assert lines[-1] == (
        f"estimated: {hours_text(large + SMALL_HOURS)} accelerator-hours for 2 stale trainings "
        f"(H100 {hours_text(large)}, v5p 1.72e-07)"
    )
    # The JSON holds the numbers; a utilisation twice the default halves the hours.
    rc, out, err = run_cli(ws, "build", "--dry-run", "--json", "--utilisation", "0.8", "//exp:all")
    assert rc == 0, err
    results = {item["label"]: item for item in json.loads(out)["targets"]}
    assert results["//exp:small"]["estimate"] == {
        "flops": SMALL_FLOPS,
        "accelerator_hours": pytest.approx(SMALL_HOURS / 2, rel=1e-12),
        "accelerator": "v5p",
        "chips": 4,
        "utilisation": 0.8,
    }
    assert "estimate" not in results["//exp:tokens"]  # a step that trains nothing has none
    assert store_is_untouched(ws)


def test_max_accelerator_hours_refuses_a_build_past_it_listing_the_largest(ws: Path) -> None:
    hours = estimate(*_large(ws)).hours  # type: ignore[union-attr]
    assert hours is not None and hours > 100
    for dry in (["--dry-run"], []):  # a real build stops before anything runs: the corpus is not made
        rc, out, err = run_cli(ws, "build", *dry, "--max-accelerator-hours", "100", "//exp:all")
        assert rc == 2, err
        line = error_line(err)
        assert "more than --max-accelerator-hours 100; the largest: //exp:large: " in line, line
        assert line.index("//exp:large") < line.index("//exp:small")
        assert out == "" and store_is_untouched(ws)
    rc, out, err = run_cli(ws, "build", "--dry-run", "--max-accelerator-hours", str(round(hours) + 1), "//exp:all")
    assert rc == 0, err


def _large(ws: Path) -> tuple:
    graph = plan(ws, "//exp:large")
    return graph.targets["//exp:large"], graph.targets.get
