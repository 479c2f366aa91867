"""A training's FLOPs are counted three times alike: by rules/common/flops.py (what a dry run
estimates accelerator-hours from), by the scaling recipes of rules/scaling/scaling.star
(which pick each run's tokens for its budget), and by Levanter (what a run logs as
`throughput/total_gflops`). Whatever the family and shape, the three agree."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_lm import CONFIG, lm_workspace
from helpers_workspace import plan

from rules.common import lm_config
from rules.common.flops import training_flops_per_token

VOCAB = 300
SHAPES = [
    dict(hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, seq_len=seq_len)
    for hidden, heads in ((32, 2), (96, 8))
    for kv_heads in (1, heads)
    for layers, seq_len in ((1, 64), (3, 256))
]
BUILD = """
load("//rules/lm:lm.star", "llama", "mixtral")
load("//rules/scaling:scaling.star", "training_flops_per_token")
SHAPES = {shapes}
FAMILIES = ({{}}, {{"family": "qwen"}}, {{"family": "olmo2"}})
dense = [dict(llama(**shape), **family) for shape in SHAPES for family in FAMILIES]
moes = [
    mixtral(experts = 4, experts_per_token = 2, shared_experts = shared, **shape)
    for shape in SHAPES
    for shared in (0, 1)
]
for index, model in enumerate(dense + moes):
    config = {{"model": model, "flops": training_flops_per_token(model, {vocab})}}
    py_step(name = "m%d" % index, fn = "steps.py:run", config = config)
"""


def _levanter_per_token(model: dict, vocab_size: int) -> float:
    from rules.common.levanter.configs import CONFIG_CLASSES

    fields = {name: value for name, value in model.items() if name not in ("family", "activation_function")}
    return 3 * CONFIG_CLASSES[model.get("family", "llama")](**fields).flops_per_token(vocab_size)


def test_the_estimate_the_recipes_and_levanter_count_the_flops_per_token_alike(tmp_path: Path) -> None:
    ws = lm_workspace(
        tmp_path / "ws",
        BUILD.format(shapes=repr(SHAPES), vocab=VOCAB),
        CONFIG.replace('"rules.lm.decls"', '"rules.lm.decls", "rules.scaling.decls"'),
        macros=("lm/lm.star", "scaling/scaling.star"),
    )
    (ws / "exp" / "steps.py").write_text("def run(ctx):\n    pass\n")
    targets = plan(ws, "//exp:all").targets
    assert len(targets) == len(SHAPES) * 5
    families = set()
    for label, target in targets.items():
        model = lm_config.resolve("model", target.attrs["config"]["model"])
        families.add(model.get("family", "llama"))
        ours = training_flops_per_token(model, VOCAB)
        assert ours == pytest.approx(target.attrs["config"]["flops"], rel=1e-12), label
        assert ours == pytest.approx(_levanter_per_token(model, VOCAB), rel=1e-12), label
    assert families == {"llama", "qwen", "olmo2", "mixtral"}
