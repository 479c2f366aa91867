"""Hugging Face checkpoints and Levanter's models: the export of a trained model
(export_hf, and sft_lm's base when it is a trained model), and the checks that a Hugging
Face checkpoint fits a model before a run starts from it (train_lm's `init_from_hf`,
sft_lm's base)."""

from __future__ import annotations

import rules.common.levanter.environment  # noqa: F401  (first: offline, before Levanter)

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from levanter.main import export_lm_to_hf
from levanter.trainer import TrainerConfig
from tokenizers import Tokenizer
from transformers import AutoConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from marinbuild.targets.context import StepFailed
from rules.common import lm_config
from rules.common.hf_format import TOKENIZER, check_checkpoint
from rules.common.levanter.configs import model_config
from rules.common.levanter.data import local_copy, read_text
from rules.common.training_files import CHECKPOINT, MODEL_FILE, TOKENIZER_DIR

# Model fields each family's Hugging Face model cannot hold once set (true, or not 0):
# Levanter refuses to export a Llama's extra norms, `use_bias` puts biases on the norms too
# (which no config.json has a field for), and no Hugging Face Mixtral has shared experts.
_NOT_IN_HF = {
    "llama": ("hybrid_norm", "input_embedding_norm", "use_qk_norm", "use_bias"),
    "mixtral": ("input_embedding_norm", "use_bias", "n_shared_experts"),
    "qwen": ("input_embedding_norm", "use_bias"),
    "olmo2": ("use_bias",),
}
# The config.json fields that fix the weights' shapes and what they compute, and the model
# field each comes from (not max_position_embeddings: a run may train on shorter or longer
# sequences than the checkpoint did).
_HF_ARCHITECTURE = {
    "hidden_size": "hidden_dim",
    "intermediate_size": "intermediate_dim",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads",
    "hidden_act": "activation_function",
    "rms_norm_eps": "layer_norm_epsilon",
    "tie_word_embeddings": "tie_word_embeddings",
    "rope_theta": "rope (not settable)",
    "rope_scaling": "rope (not settable)",
}
# ...and those of one family only.
_HF_ARCHITECTURE_OF = {
    "llama": {"head_dim": "head_dim", "attention_bias": "use_bias", "mlp_bias": "use_bias"},
    "mixtral": {"num_local_experts": "n_routed_experts", "num_experts_per_tok": "num_experts_per_tok"},
    "qwen": {},
    "olmo2": {"attention_bias": "attention_bias"},
}
# What Levanter's converter adds to config.json from the tokenizer that is no setting of a
# causal language model: an encoder-decoder's first decoder token, and tokens suppressed at
# the start of a generation (Whisper's), set to the tokenizer's BOS, EOS and padding.
_NOT_CAUSAL_LM_SETTINGS = ("decoder_start_token_id", "begin_suppress_tokens")


def _not_in_hf(fields: Mapping[str, Any]) -> list[str]:
    """The fields of a resolved model dict that its family's Hugging Face model cannot hold."""
    family = lm_config.family(fields)
    unsupported = [
        name if isinstance(fields[name], bool) else f"{name} {fields[name]}"
        for name in _NOT_IN_HF[family.name]
        if fields[name]
    ]
    if fields.get("head_dim") not in (None, fields["hidden_dim"] // fields["num_heads"]):
        unsupported.append(f"head_dim {fields['head_dim']} (other than hidden_dim // num_heads)")
    return unsupported


def export(model: str, out: Path, tmp: Path) -> None:
    """A `train_lm` output or kept state (a directory or store URL) as a Hugging Face
    checkpoint in `out`, by Levanter's own export (`export_lm_to_hf`): config.json,
    model.safetensors (in the checkpoint's float32) and the tokenizer the model was trained
    with, on the host's CPU; config.json is then written again as transformers writes it."""
    try:
        record = json.loads(read_text(f"{model}/{MODEL_FILE}"))
    except FileNotFoundError:
        raise StepFailed(f"no {MODEL_FILE} in the model's output: export_hf reads a train_lm target") from None
    fields = lm_config.resolve("model", record["model"])
    unsupported = _not_in_hf(fields)
    if unsupported:
        title = lm_config.family(fields).title
        raise StepFailed(f"the model has {', '.join(unsupported)}, which a Hugging Face {title} cannot hold")
    tokenizer = local_copy(f"{model}/{TOKENIZER_DIR}", tmp / "tokenizer")
    export_lm_to_hf.main(
        export_lm_to_hf.ConvertLmConfig(
            trainer=TrainerConfig(),  # unused on the CPU
            checkpoint_path=f"{model}/{CHECKPOINT}",
            output_dir=str(out),
            model=model_config(fields, tokenizer, tmp),
            use_cpu=True,
        )
    )
    _standard_config(out)


def _standard_config(out: Path) -> None:
    """config.json of the export in `out` as transformers' `save_pretrained` writes it: the
    model class in `architectures` (by which vLLM and other serving stacks pick the model's
    implementation), and only the values that differ from the config class's defaults.
    Levanter's converter writes every field, `architectures` null, and generation settings
    nobody set (`max_length` 20, `top_k` 50, ...), which generation would take as the
    model's own. The tokenizer's BOS, EOS and padding tokens stay; transformers derives
    its generation config from them, so no generation_config.json is written."""
    config = AutoConfig.from_pretrained(str(out), local_files_only=True)
    config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
    for name in _NOT_CAUSAL_LM_SETTINGS:
        setattr(config, name, None)
    config.save_pretrained(str(out))


def check_hf_base(location: str, fields: Mapping[str, Any], tokenizer: Path, tmp: Path) -> Path:
    """The local directory of the Hugging Face checkpoint at `location` that a run of model
    `fields` on data tokenized with `tokenizer` starts from, once it is known to fit: of
    the model's family, with weights, of the same architecture (compared as Levanter's
    converter writes `fields` into a config.json), with the data's vocabulary."""
    family = lm_config.family(fields)
    unsupported = _not_in_hf(fields)
    if unsupported:
        raise StepFailed(
            f"model has {', '.join(unsupported)}: no Hugging Face {family.title} can start it (init_from_hf)"
        )
    local = local_copy(location, tmp / "hf-base")
    check_checkpoint(local, family.name, "init_from_hf")
    differ = architecture_differences(local, fields, tokenizer, tmp)
    if differ:
        shown = "; ".join(f"{difference} (model: {field})" for difference, field in differ)
        raise StepFailed(f"init_from_hf's config.json does not match this target's model: {shown}")
    vocabulary = Tokenizer.from_file(str(local / TOKENIZER)).get_vocab(with_added_tokens=True)
    if vocabulary != Tokenizer.from_file(str(tokenizer / TOKENIZER)).get_vocab(with_added_tokens=True):
        raise StepFailed(
            "init_from_hf's tokenizer is not the one the data was tokenized with: tokenize the data with "
            "hf_tokenizer(dir = <the checkpoint's label>)"
        )
    return local


def architecture_differences(
    checkpoint: Path, fields: Mapping[str, Any], tokenizer: Path, tmp: Path
) -> list[tuple[str, str]]:
    """Where the config.json of the Hugging Face checkpoint in `checkpoint` differs from what
    Levanter's converter writes for model `fields`: ("hidden_size 32 there, 64 here", the
    model field behind it) for each config.json field that fixes the weights' shapes or
    what they compute."""
    theirs = AutoConfig.from_pretrained(str(checkpoint), local_files_only=True).to_dict()
    ours = model_config(fields, tokenizer, tmp).to_hf_config(vocab_size=theirs["vocab_size"]).to_dict()
    family = lm_config.family(fields)
    return [
        (f"{name} {theirs.get(name)!r} there, {ours.get(name)!r} here", field)
        for name, field in {**_HF_ARCHITECTURE, **_HF_ARCHITECTURE_OF[family.name]}.items()
        if theirs.get(name) != ours.get(name)
    ]
