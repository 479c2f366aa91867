"""A tiny Llama's workspace for the tests of train_lm and of what reads a trained model: its
BUILD file, a build through the CLI, a target's output, a checkpoint as a build writes it.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from conftest import run_cli

REPO = Path(__file__).resolve().parents[1]

TRAIN_TIMEOUT_S = 300

PKG = "//exp"

CONFIG = 'rules = ["rules.data.decls", "rules.tokenize.decls", "rules.lm.decls"]\n'


def lm_build_file(
    lr: float = 3e-3,
    sample_count: int = 60,
    resources: str = "cpu()",
    trainer: str | None = None,
    seed: int = 0,
    keep: str = "[]",
) -> str:
    trainer = (
        trainer or '{"steps": 6, "batch_size": 4, "eval_interval": 3, "checkpoint_interval": 2, "max_eval_batches": 2}'
    )
    return f"""
load("//rules/lm:lm.star", "cpu", "gpu", "llama")
python_corpus(name = "corpus", sample_count = {sample_count}, chunk_characters = 1500, validation_fraction = 0.1)
bpe_tokenizer(name = "tokenizer", data = ":corpus", vocab_size = 300)
tokenize(name = "tokens", data = ":corpus", tokenizer = ":tokenizer")
train_lm(
    name = "model",
    data = ":tokens",
    model = llama(hidden = 32, layers = 1, heads = 2, seq_len = 64),
    optimizer = {{"learning_rate": {lr}}},
    trainer = {trainer},
    seed = {seed},
    keep_checkpoints = {keep},
    resources = {resources},
)
eval_lm(name = "eval", model = ":model", data = [":tokens"], batch_size = 4, max_batches = 2)
"""


def lm_workspace(root: Path, build: str, config: str = CONFIG, macros: tuple[str, ...] = ("lm/lm.star",)) -> Path:
    """A workspace of `build` as //exp, with copies of the repository's `macros` (under
    rules/) and the rule modules `config` names."""
    for star in macros:
        (root / "rules" / star).parent.mkdir(parents=True)
        (root / "rules" / star).write_text((REPO / "rules" / star).read_text())
    (root / "exp").mkdir()
    (root / "exp" / "BUILD.marin").write_text(build)
    (root / "marinbuild.toml").write_text(config)
    return root


SWEEP_CONFIG = 'rules = ["rules.data.decls", "rules.tokenize.decls", "rules.lm.decls", "rules.scaling.decls"]\n'


def sweep_workspace(root: Path, build: str) -> Path:
    """A workspace of `build` with the lm and scaling macros, for scaling sweeps and fits."""
    return lm_workspace(root, build, SWEEP_CONFIG, ("lm/lm.star", "scaling/scaling.star"))


def lm_build(ws: Path, *args: str) -> dict:
    rc, out, err = run_cli(ws, "build", "--json", *args, timeout=TRAIN_TIMEOUT_S)
    assert rc == 0, f"exit {rc}\n{out}\n{err}"
    return json.loads(out) | {"stderr": err}


def target_output(data: dict, label: str) -> Path:
    return Path(next(item["output"] for item in data["targets"] if item["label"] == label))


def wait_for_checkpoint(
    scratch: Path, build: subprocess.Popen, at_least: int = 0, timeout: float = TRAIN_TIMEOUT_S
) -> int:
    """The step of the first complete checkpoint at step `at_least` or later that the build
    writes into its scratch space."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert build.poll() is None, "the build ended before it wrote the checkpoint"
        for metadata in scratch.glob("*/*/checkpoints/step-*/metadata.json"):
            try:
                step = json.loads(metadata.read_text())["step"]
            except ValueError:
                continue  # caught while Levanter writes it: look again
            if step >= at_least:
                return step
        time.sleep(0.05)
    raise AssertionError("no checkpoint appeared")
