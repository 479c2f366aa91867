"""export_hf's checkpoints as the tools that serve models read them: each family's
config.json names its transformers class in `architectures` (vLLM and other serving stacks
choose the model's implementation by it, not by `model_type`), holds no generation setting
the model does not have, and the class it names loads the weights and runs them.

One tiny model of each family train_lm trains (d=32, 64-token sequences, 2 steps),
exported, then taken back in by hf_model (whose checks of the weights' headers and shapes
real exports pass, for every family). Loading runs in a process of its own, with PyTorch,
offline, as tests/rules/lm/test_hf_model.py does it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import cli_env
from helpers_hf import REPO, TOKENS, hf_build
from helpers_lm import TRAIN_TIMEOUT_S, lm_workspace

SIZES = "hidden = 32, layers = 2, heads = 2, seq_len = 64"
MODELS = {
    "llama": f"llama({SIZES})",
    "mixtral": f"mixtral({SIZES}, experts = 4, experts_per_token = 2, intermediate = 64)",
    "qwen": f"qwen({SIZES})",
    "olmo2": f"olmo2({SIZES})",
}
BUILD = """
load("//rules/lm:lm.star", "llama", "mixtral", "olmo2", "qwen")
python_corpus(name = "corpus", sample_count = 40, chunk_characters = 1500, validation_fraction = 0.1)
bpe_tokenizer(name = "tokenizer", data = ":corpus", vocab_size = 300)
tokenize(name = "tokens", data = ":corpus", tokenizer = ":tokenizer")
TRAINER = {"steps": 2, "batch_size": 2, "max_eval_batches": 1}
""" + "".join(
    f"""
train_lm(name = "{family}", data = ":tokens", model = {model}, trainer = TRAINER)
export_hf(name = "{family}_hf", model = ":{family}")
hf_model(name = "{family}_in", dir = ":{family}_hf", family = "{family}")
"""
    for family, model in MODELS.items()
)
# The generation settings PretrainedConfig used to carry, which a config.json written field by
# field holds at their defaults: generation would take them as the model's own.
GENERATION_SETTINGS = {
    "max_length",
    "min_length",
    "do_sample",
    "num_beams",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "begin_suppress_tokens",
    "suppress_tokens",
    "decoder_start_token_id",
    "forced_bos_token_id",
    "forced_eos_token_id",
}

# The transformers class of each family's exports: what AutoModelForCausalLM maps its model_type to.
CLASSES = {
    "llama": "LlamaForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen": "Qwen2ForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
}

# In a process of its own: each export's class found by its config.json's `architectures`
# (as a serving stack finds it), the class AutoModelForCausalLM picks for its model_type,
# the logits of the class's model, loaded from the export, on TOKENS, and the special
# tokens of the export's tokenizer.
LOAD = """
import json, sys
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

tokens, directories = json.loads(sys.argv[1]), json.loads(sys.argv[2])
found = {}
for directory in directories:
    named = json.loads(open(f"{directory}/config.json").read())["architectures"]
    cls = getattr(transformers, named[0])
    auto = AutoModelForCausalLM._model_mapping[type(AutoConfig.from_pretrained(directory, local_files_only=True))]
    model = cls.from_pretrained(directory, local_files_only=True, torch_dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0]
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    found[directory] = {
        "architectures": named,
        "auto": auto.__name__,
        "loaded": type(model).__name__,
        "shape": list(logits.shape),
        "finite": bool(torch.isfinite(logits).all()),
        "special_tokens": [tokenizer.bos_token_id, tokenizer.eos_token_id],
    }
print(json.dumps(found))
"""


def _load(directories: list[Path]) -> dict[str, dict]:
    env = {name: value for name, value in cli_env().items() if name != "USE_TORCH"}
    env |= {"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", LOAD, json.dumps(TOKENS), json.dumps([str(path) for path in directories])],
        capture_output=True,
        text=True,
        env=env,
        timeout=TRAIN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_each_familys_export_names_its_class_and_that_class_loads_and_runs_it(tmp_path: Path) -> None:
    ws = lm_workspace(tmp_path / "ws", BUILD)
    data = hf_build(ws, "//exp:all", timeout=2 * TRAIN_TIMEOUT_S)
    exports = {family: Path(data[f"//exp:{family}_hf"]["output"]) for family in MODELS}
    loaded = _load(list(exports.values()))

    for family, directory in exports.items():
        config = json.loads((directory / "config.json").read_text())
        found = loaded[str(directory)]
        assert config["architectures"] == [CLASSES[family]], (family, config)
        assert {name: found[name] for name in ("architectures", "auto", "loaded", "shape", "finite")} == {
            "architectures": [CLASSES[family]],
            "auto": CLASSES[family],
            "loaded": CLASSES[family],
            "shape": [len(TOKENS), 300],
            "finite": True,
        }, family
        # Of generation, only what the model has: the tokenizer's special tokens.
        assert not GENERATION_SETTINGS & set(config), (family, sorted(GENERATION_SETTINGS & set(config)))
        assert [config.get("bos_token_id"), config.get("eos_token_id")] == found["special_tokens"], family
        assert not (directory / "generation_config.json").exists()
        assert data[f"//exp:{family}_in"]["status"] == "built"  # its headers and shapes pass hf_model's checks
