"""Models in Hugging Face format for the tests that export, load or fine-tune one: a tiny
corpus and trainer, a build by label, and the logits of Levanter and transformers compared.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from conftest import cli_env, run_cli
from helpers_lm import REPO, TRAIN_TIMEOUT_S

# Float32 on the CPU, two implementations of the same arithmetic in different orders:
# the logits (of magnitude about 3 here) agree to about 2e-6; a different set of weights
# (the checkpoint 2 steps earlier) differs by more than 1e-2.
LOGITS_ATOL = 1e-4

TOKENS = [0, 5, 17, 99, 200, 3, 45, 120, 7, 250, 1]

DATA = """
load("//rules/lm:lm.star", "llama")
python_corpus(name = "corpus", sample_count = 60, chunk_characters = 1500, validation_fraction = 0.1)
bpe_tokenizer(name = "tokenizer", data = ":corpus", vocab_size = 300)
tokenize(name = "tokens", data = ":corpus", tokenizer = ":tokenizer")
"""

TRAINER = '{"steps": 6, "batch_size": 4, "eval_interval": 3, "max_eval_batches": 2}'
# A tiny model that keeps its checkpoint at step 3, exported at its last step.
EXPORTED_MODEL = f"""
train_lm(
    name = "model",
    data = ":tokens",
    model = llama(hidden = 32, layers = 1, heads = 2, seq_len = 64),
    optimizer = {{"learning_rate": 3e-3}},
    trainer = {TRAINER},
    keep_checkpoints = [3],
)
export_hf(name = "export", model = ":model")
"""


# Run in a process of its own: Levanter's logits from a train_lm output (or kept state),
# and transformers' (PyTorch) from an HF directory, for each pair given.
LOGITS = """
import json, sys, tempfile
from pathlib import Path
import numpy as np
import torch
from transformers import AutoModelForCausalLM
import equinox as eqx, haliax as hax, jax, jax.numpy as jnp
from levanter.checkpoint import load_checkpoint
from levanter.layers.attention import AttentionMask
from levanter.utils.jax_utils import local_cpu_mesh
from rules.common.levanter import configs

tokens, pairs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
results = []
for trained, exported in pairs:
    hf = AutoModelForCausalLM.from_pretrained(exported, local_files_only=True, torch_dtype=torch.float32)
    with torch.no_grad():
        theirs = hf(torch.tensor([tokens])).logits[0].numpy()
    record = json.loads((Path(trained) / "model.json").read_text())
    config = configs.model_config(record["model"], Path(trained) / "tokenizer", Path(tempfile.mkdtemp()))
    with local_cpu_mesh():
        model = eqx.filter_eval_shape(config.build, hax.Axis("vocab", theirs.shape[-1]), key=jax.random.PRNGKey(0))
        model = load_checkpoint(model, f"{trained}/checkpoint", subpath="model")
        ids = hax.named(jnp.array(tokens), config.Pos.resize(len(tokens)))
        ours = np.asarray(model(ids, attn_mask=AttentionMask.causal()).array)
    results.append([ours.tolist(), theirs.tolist()])
print(json.dumps(results))
"""


def hf_build(ws: Path, *args: str, expect_rc: int = 0, timeout: int = TRAIN_TIMEOUT_S) -> dict:
    rc, out, err = run_cli(ws, "build", "--json", *args, timeout=timeout)
    assert rc == expect_rc, f"exit {rc}\n{out}\n{err}"
    data = json.loads(out)
    return {item["label"]: item for item in data["targets"]} | {"stderr": err}


def hf_logits(pairs: list[tuple[Path, Path]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(Levanter's, transformers') logits of TOKENS for each (train_lm output, HF directory)."""
    env = {name: value for name, value in cli_env().items() if name != "USE_TORCH"}
    env |= {"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", LOGITS, json.dumps(TOKENS), json.dumps([[str(a), str(b)] for a, b in pairs])],
        capture_output=True,
        text=True,
        env=env,
        timeout=TRAIN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [(np.array(ours), np.array(theirs)) for ours, theirs in json.loads(done.stdout.splitlines()[-1])]


def hf_summary(data: dict, label: str) -> dict:
    return json.loads((Path(data[label]["output"]) / "summary.json").read_text())
