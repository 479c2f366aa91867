"""What a tokenizer directory holds, as the tokenizer rules write it and the steps that
read one (tokenize, sft_lm) expect it; and what tokenize asks for."""

from marinbuild.targets.rule import Resources

TOKENIZE_RESOURCES = Resources(cpu=1, memory_gb=2)

SPECIAL_ROLES = ("bos", "eos", "pad")
DEFAULT_SPECIAL_TOKENS = {"bos": "<|bos|>", "eos": "<|eos|>", "pad": "<|pad|>"}
CONFIG = "config.json"
# A Levanter cache stores every field the tokenizer returns: no token_type_ids.
MODEL_INPUTS = ["input_ids", "attention_mask"]
# What a Hub tokenizer is made of; weights are never downloaded.
TOKENIZER_FILES = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "config.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "*.tiktoken",
]
