"""What a Hugging Face checkpoint directory must hold to be read: checked from its files.

`hf_model` checks its input with `check_checkpoint` before it publishes anything, and
`train_lm(init_from_hf = ...)` again before Levanter loads it (the label may name any
target holding such a directory), so that a directory without weights, of another model
family, cut short by a copy, or of other shapes than its config.json says fails with one
line naming the file and what is wrong — not, once something reads the weights, with a
traceback from deep inside transformers or Levanter naming neither. Only the headers of
the safetensors files are read, never their tensors, and nothing here imports an ML library.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from marinbuild.targets.context import StepFailed
from rules.common.lm_config import FAMILIES

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
TOKENIZER = "tokenizer.json"
# What a checkpoint is made of (the Hub's names): config, weights, tokenizer.
CHECKPOINT_FILES = [
    CONFIG,
    "generation_config.json",
    "*.safetensors",
    WEIGHTS_INDEX,
    TOKENIZER,
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
]

# A safetensors file: the length of its header (8 bytes, little-endian), the header (a JSON
# object {tensor name: {"dtype", "shape", "data_offsets": [begin, end]}}, with an optional
# "__metadata__" of strings), then the tensors' bytes, which the offsets cover exactly,
# without gaps or overlaps: what the safetensors library checks before it reads a tensor.
_HEADER_LENGTH = struct.Struct("<Q")
_METADATA = "__metadata__"
# The longest header the safetensors library reads: a longer one is refused unread.
MAX_HEADER_BYTES = 100_000_000
# Bits per element of each dtype the safetensors library knows.
DTYPE_BITS = {
    **dict.fromkeys(("BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0"), 8),
    **dict.fromkeys(("I16", "U16", "F16", "BF16"), 16),
    **dict.fromkeys(("I32", "U32", "F32"), 32),
    **dict.fromkeys(("I64", "U64", "F64"), 64),
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}
_LAYER = re.compile(r"model\.layers\.(\d+)\.")
# What a safetensors file is refused with: the reason, after the file's name.
_Refusal = Callable[[str], StepFailed]


class Tensor(NamedTuple):
    """A tensor as a safetensors header declares it, and the file declaring it."""

    file: str
    dtype: str
    shape: tuple[int, ...]
    offsets: tuple[int, int]


class Shape(NamedTuple):
    """The shape config.json implies for a weight: its sizes, and the fields they come from."""

    sizes: tuple[int, ...]
    fields: tuple[str, ...]


def checkpoint_directory(files: Iterable[Path]) -> Path:
    """The directory of a checkpoint among an input's files: the one holding config.json."""
    found = sorted({path.parent for path in files if path.name == CONFIG})
    if len(found) != 1:
        raise StepFailed(f"expected one Hugging Face checkpoint (a directory holding {CONFIG}), found {len(found)}")
    return found[0]


def check_checkpoint(directory: Path, family: str, shown: str) -> dict:
    """config.json of the checkpoint in `directory` (called `shown` in errors), once it is
    known to be of `family` (a family of rules/common/lm_config.py: its config.json says the
    family's Hugging Face `model_type`), with a fast tokenizer and safetensors weights that
    are whole (each file as long as its header says), consistent (the index and its shards
    agree) and of the shapes config.json implies."""
    try:
        config = json.loads((directory / CONFIG).read_text())
    except FileNotFoundError:
        raise StepFailed(f"{shown} is not a Hugging Face checkpoint: it has no {CONFIG}") from None
    except ValueError as error:
        raise StepFailed(f"{shown}: {CONFIG} is not JSON ({error})") from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    expected = FAMILIES[family].hf_model_type
    if model_type != expected:
        named = "" if expected == family else f" (model_type {expected!r})"
        raise StepFailed(f"{shown}: {CONFIG} says model_type {model_type!r}, not the declared family {family!r}{named}")
    weight_map = _weight_map(directory, shown)
    if not (directory / TOKENIZER).is_file():
        raise StepFailed(f"{shown} has no {TOKENIZER}: Levanter needs a fast tokenizer")
    files = sorted(path for path in directory.glob("*.safetensors") if path.is_file())
    headers = {path.name: read_header(path, shown) for path in files}
    tensors = headers[WEIGHTS] if weight_map is None else _indexed_tensors(headers, weight_map, shown)
    source = WEIGHTS if weight_map is None else WEIGHTS_INDEX
    _check_shapes(tensors, expected_shapes(config, shown), source, shown)
    return config


# -- the files of the weights ----------------------------------------------------------------


def _weight_map(directory: Path, shown: str) -> dict[str, str] | None:
    """{tensor: shard} of a sharded checkpoint's index, once its shards are known to be
    there; None when model.safetensors holds the weights (it is what loaders read first)."""
    if (directory / WEIGHTS).is_file():
        return None
    index = directory / WEIGHTS_INDEX
    if not index.is_file():
        other = " (pytorch_model.bin is not read: save it as safetensors)" if any(directory.glob("*.bin")) else ""
        raise StepFailed(f"{shown} holds no weights: no {WEIGHTS} and no {WEIGHTS_INDEX}{other}")
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (ValueError, KeyError, TypeError):
        weight_map = None
    if not isinstance(weight_map, dict) or not all(isinstance(shard, str) for shard in weight_map.values()):
        raise StepFailed(f"{shown} holds no weights: {WEIGHTS_INDEX} has no weight_map")
    shards = sorted(set(weight_map.values()))
    strays = [shard for shard in shards if Path(shard).name != shard or not shard.endswith(".safetensors")]
    if strays:  # "../x.safetensors" would be read from outside the checkpoint, and not published with it
        raise StepFailed(f"{shown}: {WEIGHTS_INDEX} names shards that are not .safetensors files beside it: {strays}")
    absent = [shard for shard in shards if not (directory / shard).is_file()]
    if absent:
        raise StepFailed(
            f"{shown} holds no weights: {WEIGHTS_INDEX} names shards that are not there: {', '.join(absent)}"
        )
    return weight_map


def _indexed_tensors(
    headers: Mapping[str, Mapping[str, Tensor]], weight_map: Mapping[str, str], shown: str
) -> dict[str, Tensor]:
    """The tensors an index names, each found in the shard it says holds it."""
    for name, shard in weight_map.items():
        if name not in headers[shard]:
            raise StepFailed(f"{shown}: {WEIGHTS_INDEX} puts {name} in {shard}, which does not hold it")
    return {name: headers[shard][name] for name, shard in weight_map.items()}


def read_header(path: Path, shown: str) -> dict[str, Tensor]:
    """The tensors the safetensors file at `path` declares, once its header is known to be
    sound and the file as long as the header says: read as the safetensors library reads
    it, but refusing with one line naming the file (a header of any declared length is
    never read past the file's end nor past the library's limit)."""

    def bad(what: str) -> StepFailed:
        return StepFailed(f"{shown}: {path.name} {what}")

    size = path.stat().st_size
    with path.open("rb") as file:
        prefix = file.read(_HEADER_LENGTH.size)
        if len(prefix) < _HEADER_LENGTH.size:
            raise bad(f"is no safetensors file: {size} bytes, shorter than the length of a header")
        (length,) = _HEADER_LENGTH.unpack(prefix)
        if length > MAX_HEADER_BYTES:
            raise bad(f"declares a header of {length:,} bytes, more than the {MAX_HEADER_BYTES:,} safetensors reads")
        if length > size - _HEADER_LENGTH.size:
            raise bad(f"is cut short: it declares a header of {length:,} bytes, and the whole file is {size:,}")
        text = file.read(length)
    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise bad(f"has a header that is not JSON ({str(error)[:200]})") from None
    if not isinstance(header, dict):
        raise bad(f"has a header that is not a JSON object but {type(header).__name__}")
    metadata = header.pop(_METADATA, {})
    if not isinstance(metadata, dict) or not all(isinstance(value, str) for value in metadata.values()):
        raise bad(f"has a {_METADATA} that is not a map of strings")
    tensors = {name: _tensor(path.name, name, entry, bad) for name, entry in header.items()}
    _check_layout(tensors, size - _HEADER_LENGTH.size - length, bad)
    return tensors


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise ValueError(f"{twice[0]!r} appears twice")
    return dict(pairs)


def _tensor(file: str, name: str, entry: Any, bad: _Refusal) -> Tensor:
    """A header's entry of one tensor, once its fields are known to be what safetensors reads."""
    if not isinstance(entry, dict):
        raise bad(f"declares {name} as {entry!r}, not {{dtype, shape, data_offsets}}")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise bad(f"declares {name} of dtype {dtype!r}, which safetensors does not know")
    if not isinstance(shape, list) or not all(_is_size(size) for size in shape):
        raise bad(f"declares {name} of shape {shape!r}, not a list of sizes")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_size(offset) for offset in offsets)):
        raise bad(f"declares {name} at data_offsets {offsets!r}, not [begin, end]")
    if offsets[0] > offsets[1]:
        raise bad(f"declares {name} at data_offsets {offsets!r}, which end before they begin")
    return Tensor(file, dtype, tuple(shape), (offsets[0], offsets[1]))


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_layout(tensors: Mapping[str, Tensor], data_bytes: int, bad: _Refusal) -> None:
    """The tensors' offsets cover the `data_bytes` after the header exactly, one after the
    other, each as many bytes as its dtype and shape make."""
    end, previous = 0, None
    for name, tensor in sorted(tensors.items(), key=lambda item: item[1].offsets):
        begin, stop = tensor.offsets
        if begin < end:
            raise bad(f"declares {previous} and {name} at overlapping offsets (bytes {begin:,} to {end:,})")
        if begin > end:
            raise bad(f"declares {name} at byte {begin:,}, leaving bytes {end:,} to {begin:,} to no tensor")
        bits = math.prod(tensor.shape) * DTYPE_BITS[tensor.dtype]
        if bits != 8 * (stop - begin):
            raise bad(
                f"declares {name} of dtype {tensor.dtype} and shape {list(tensor.shape)} ({bits / 8:,g} bytes) "
                f"at data_offsets [{begin}, {stop}] ({stop - begin:,} bytes)"
            )
        end, previous = stop, name
    if end > data_bytes:
        raise bad(f"is cut short: its header declares {end:,} bytes of tensors, and {data_bytes:,} follow it")
    if end < data_bytes:
        raise bad(f"has {data_bytes - end:,} bytes after its tensors' {end:,}, which no tensor covers")


# -- shapes against config.json -----------------------------------------------------------------


def expected_shapes(config: Mapping[str, Any], shown: str) -> dict[str, Shape]:
    """The weights a checkpoint of `config` must hold, by their Hugging Face names, and their
    shapes: the embeddings, the output layer (unless tied to them), the final norm, and in
    each layer the attention's projections and the MLP's (a Mixtral's: its router and each
    expert's). Biases and the layers' norms, which differ from family to family, are not
    among them; the sizes are config.json's."""
    sizes = {name: _size(config, name, shown) for name in _SIZES}
    heads = sizes["num_attention_heads"]
    sizes["num_key_value_heads"] = _size(config, "num_key_value_heads", shown, heads)
    sizes["head_dim"] = _size(config, "head_dim", shown, sizes["hidden_size"] // heads)

    def shape(*dims: str) -> Shape:
        return Shape(tuple(math.prod(sizes[part] for part in dim.split("*")) for dim in dims), dims)

    model = {"model.embed_tokens.weight": shape("vocab_size", "hidden_size"), "model.norm.weight": shape("hidden_size")}
    if not config.get("tie_word_embeddings", False):
        model["lm_head.weight"] = shape("vocab_size", "hidden_size")
    queries, keys = "num_attention_heads*head_dim", "num_key_value_heads*head_dim"
    layer = {
        "self_attn.q_proj.weight": shape(queries, "hidden_size"),
        "self_attn.k_proj.weight": shape(keys, "hidden_size"),
        "self_attn.v_proj.weight": shape(keys, "hidden_size"),
        "self_attn.o_proj.weight": shape("hidden_size", queries),
    }
    up, down = shape("intermediate_size", "hidden_size"), shape("hidden_size", "intermediate_size")
    if config.get("model_type") == "mixtral":
        sizes["num_local_experts"] = _size(config, "num_local_experts", shown)
        layer["block_sparse_moe.gate.weight"] = shape("num_local_experts", "hidden_size")
        for expert in range(sizes["num_local_experts"]):
            experts = f"block_sparse_moe.experts.{expert}"
            layer |= {f"{experts}.w1.weight": up, f"{experts}.w2.weight": down, f"{experts}.w3.weight": up}
    else:
        layer |= {"mlp.gate_proj.weight": up, "mlp.up_proj.weight": up, "mlp.down_proj.weight": down}
    for index in range(sizes["num_hidden_layers"]):
        model |= {f"model.layers.{index}.{name}": found for name, found in layer.items()}
    return model


# The config.json sizes every family's weights are made of (besides those with defaults).
_SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


def _size(config: Mapping[str, Any], name: str, shown: str, default: int | None = None) -> int:
    value = config.get(name)
    if value is None and default is not None:
        return default
    if name not in config:
        raise StepFailed(f"{shown}: {CONFIG} has no {name}")
    if not _is_size(value) or value == 0:
        raise StepFailed(f"{shown}: {CONFIG} says {name} {value!r}, not a positive integer")
    return value


def _check_shapes(tensors: Mapping[str, Tensor], expected: Mapping[str, Shape], source: str, shown: str) -> None:
    """Every weight `expected` in `tensors` (of the weights in `source`), of its shape, and
    as many layers as config.json says."""
    layers = {int(match.group(1)) for name in tensors if (match := _LAYER.match(name))}
    wanted = {int(match.group(1)) for name in expected if (match := _LAYER.match(name))}
    if layers != wanted:
        found = f"{len(layers)} layers ({min(layers)} to {max(layers)})" if layers else "no layers"
        raise StepFailed(f"{shown}: {source} holds {found}, but {CONFIG} says num_hidden_layers {len(wanted)}")
    for name, shape in expected.items():
        tensor = tensors.get(name)
        if tensor is None:
            raise StepFailed(f"{shown}: {source} has no {name}, which {CONFIG} implies")
        if tensor.shape != shape.sizes:
            raise StepFailed(
                f"{shown}: {tensor.file}: {name} has shape {list(tensor.shape)}, but {CONFIG} makes it "
                f"[{', '.join(shape.fields)}] = {list(shape.sizes)}"
            )
