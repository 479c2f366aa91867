"""Checkpoints in the Hugging Face Hub's format, generated for tests: a tiny Llama's
config.json, its weights as the safetensors library lays them out (in one file, or in
shards named by an index as `save_pretrained` writes them) and its tokenizer's files, so
that tests can put them in a workspace or a Hub cache (`helpers_hub`) whole, or damaged as
a cut-short download, a hostile header or a hand-edited config would leave them.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence

# Bytes per element of the dtypes the fixtures write (safetensors' names).
ITEM_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2}


def safetensors_file(
    tensors: Mapping[str, tuple[str, Sequence[int]]], metadata: Mapping[str, str] | None = None
) -> bytes:
    """A safetensors file of `tensors` ({name: (dtype, shape)}) laid out as the safetensors
    library writes one: the tensors ordered by descending element size, then by name, their
    bytes one after the other; the JSON header padded with spaces to a multiple of 8 bytes
    and preceded by its length (8 bytes, little-endian). The tensors' bytes are a filler
    pattern: what reads these fixtures checks layouts and shapes, not values."""
    order = sorted(tensors, key=lambda name: (-ITEM_BYTES[tensors[name][0]], name))
    header: dict[str, object] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for name in order:
        dtype, shape = tensors[name]
        size = math.prod(shape) * ITEM_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(index % 251 for index in range(offset))


def llama_config(**fields: object) -> dict[str, object]:
    """A tiny Llama's config.json as transformers writes one (LlamaConfig.save_pretrained), with `fields` changed."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": 16,
        "initializer_range": 0.02,
        "intermediate_size": 32,
        "max_position_embeddings": 128,
        "model_type": "llama",
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.40.0",
        "vocab_size": 64,
        **fields,
    }


def llama_weights(config: Mapping[str, object], dtype: str = "BF16") -> dict[str, tuple[str, tuple[int, ...]]]:
    """{name: (dtype, shape)} of a Llama of `config` (config.json's fields) under transformers'
    names, with the rotary frequencies older versions of transformers saved in each layer."""
    hidden, inner, vocab = int(config["hidden_size"]), int(config["intermediate_size"]), int(config["vocab_size"])
    heads, kv_heads = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    head_dim = hidden // heads
    weights = {"model.embed_tokens.weight": (dtype, (vocab, hidden)), "model.norm.weight": (dtype, (hidden,))}
    if not config["tie_word_embeddings"]:
        weights["lm_head.weight"] = (dtype, (vocab, hidden))
    for layer in range(int(config["num_hidden_layers"])):
        prefix = f"model.layers.{layer}."
        weights |= {
            f"{prefix}input_layernorm.weight": (dtype, (hidden,)),
            f"{prefix}post_attention_layernorm.weight": (dtype, (hidden,)),
            f"{prefix}self_attn.q_proj.weight": (dtype, (heads * head_dim, hidden)),
            f"{prefix}self_attn.k_proj.weight": (dtype, (kv_heads * head_dim, hidden)),
            f"{prefix}self_attn.v_proj.weight": (dtype, (kv_heads * head_dim, hidden)),
            f"{prefix}self_attn.o_proj.weight": (dtype, (hidden, heads * head_dim)),
            f"{prefix}self_attn.rotary_emb.inv_freq": ("F32", (head_dim // 2,)),
            f"{prefix}mlp.gate_proj.weight": (dtype, (inner, hidden)),
            f"{prefix}mlp.up_proj.weight": (dtype, (inner, hidden)),
            f"{prefix}mlp.down_proj.weight": (dtype, (hidden, inner)),
        }
    return weights


def hub_checkpoint(
    config: Mapping[str, object], weights: Mapping[str, tuple[str, Sequence[int]]], shards: int = 1
) -> dict[str, str | bytes]:
    """The files of a checkpoint as `save_pretrained` writes them to the Hub: config.json,
    the weights in model.safetensors or, with `shards` > 1, in model-0000i-of-0000n.safetensors
    named by model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"}), and
    the tokenizer's files (their contents are not read by the checks)."""
    files: dict[str, str | bytes] = {
        "config.json": json.dumps(config, indent=2, sort_keys=True) + "\n",
        "generation_config.json": json.dumps({"bos_token_id": 1, "eos_token_id": 2}) + "\n",
        "tokenizer.json": "{}",
        "tokenizer_config.json": "{}",
    }
    if shards == 1:
        return files | {"model.safetensors": safetensors_file(weights)}
    names = list(weights)
    parts = [names[len(names) * index // shards : len(names) * (index + 1) // shards] for index in range(shards)]
    weight_map = {}
    for number, part in enumerate(parts, start=1):
        shard = f"model-{number:05d}-of-{shards:05d}.safetensors"
        files[shard] = safetensors_file({name: weights[name] for name in part})
        weight_map |= dict.fromkeys(part, shard)
    total = sum(math.prod(shape) * ITEM_BYTES[dtype] for dtype, shape in weights.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    return files | {"model.safetensors.index.json": json.dumps(index, indent=2) + "\n"}
