"""Each patch of rules/common/levanter/library_patches.py: the library's own behaviour that makes it
necessary, and what the library does with the patch.

Each test has two halves. Without the patch, the library fails as the patch's docstring
says: that half fails once the library no longer does, which tells us to drop the patch
(and its test). With the patch, what the step needs goes through. On the CPU, offline
(HF_HUB_OFFLINE=1, as every step runs), with tiny models.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import equinox as eqx
import haliax as hax
import jax
import jax.numpy as jnp
import levanter.tracker
import pytest
from conftest import cli_env
from levanter.main import train_lm as levanter_train_lm
from levanter.models.lm_model import LmExample
from levanter.models.mixtral import MixtralConfig
from levanter.tracker.tracker import NoopTracker
from levanter.utils.jax_utils import local_cpu_mesh

from rules.common.levanter.library_patches import quiet_tokenizer_name, router_metrics

REPO = Path(__file__).resolve().parents[3]


# -- router_metrics: a Mixtral's loss under differentiation ----------------------------------


def test_levanters_mixtral_cannot_be_differentiated_without_router_metrics() -> None:
    config = MixtralConfig(
        seq_len=8, hidden_dim=16, intermediate_dim=32, num_layers=1, num_heads=2, num_kv_heads=2, n_routed_experts=2
    )
    example = LmExample.causal(hax.named(jnp.arange(8) % 16, config.Pos))

    # What Levanter's trainer differentiates: train_lm's loss function (looked up in its
    # module when train_lm.main runs, as the patch replaces it), under a device mesh (its
    # experts are placed by shard_map) and with a tracker set, as the trainer sets them.
    def loss(model: object) -> tuple[jax.Array, object]:
        result = levanter_train_lm.compute_next_token_loss(model, example)
        return (result[0].array, result[1]) if isinstance(result, tuple) else (result.array, {})

    gradient = eqx.filter_grad(loss, has_aux=True)
    with local_cpu_mesh(), levanter.tracker.current_tracker(NoopTracker()):
        model = config.build(hax.Axis("vocab", 16), key=jax.random.PRNGKey(0))
        # Levanter's own: the Mixtral's router statistics go to the host by a callback.
        with pytest.raises(ValueError, match="IO callbacks do not support JVP"):
            gradient(model)
        with router_metrics(config):
            _grads, metrics = eqx.filter_jit(gradient)(model)
        with pytest.raises(ValueError, match="IO callbacks do not support JVP"):  # Levanter's, back
            gradient(model)

    values = {name: float(metric.value()) for name, metric in metrics.items()}
    assert set(values) == {
        "load_balancing_loss",
        "router_z_loss",
        "moe/layer0/routing_entropy",
        "moe/layer0/expert0_load",
        "moe/layer0/expert1_load",
    }, values
    assert values["load_balancing_loss"] > 0 and values["router_z_loss"] > 0, values
    assert values["moe/layer0/expert0_load"] + values["moe/layer0/expert1_load"] == pytest.approx(1.0), values


def test_router_metrics_leaves_another_familys_loss_as_levanter_has_it() -> None:
    from levanter.models.llama import LlamaConfig

    own = levanter_train_lm.compute_next_token_loss
    with router_metrics(LlamaConfig()):
        assert levanter_train_lm.compute_next_token_loss is own


# -- converter_for_every_checkpoint: lora_lm's converter, offline ------------------------------

# In a process of its own, offline from its start (huggingface_hub and transformers read
# HF_HUB_OFFLINE when they are imported): HFCheckpointConverter.from_hf of a local Llama,
# what lora_lm.main calls, before, inside and after the patch. Each prints the hidden size
# of the converter's config, or the first line of the error.
FROM_HF = """
import json, sys
from levanter.compat.hf_checkpoints import HFCheckpointConverter
from levanter.models.llama import LlamaConfig
from rules.common.levanter.library_patches import converter_for_every_checkpoint

checkpoint = sys.argv[1]

def found():
    try:
        return HFCheckpointConverter.from_hf(checkpoint, trust_remote_code=False).default_config.hidden_dim
    except OSError as error:
        return str(error).splitlines()[0]

own = LlamaConfig().hf_checkpoint_converter(checkpoint)
before = found()
with converter_for_every_checkpoint(own):
    patched = found()
print(json.dumps([before, patched, found()]))
"""


def _llama_checkpoint(directory: Path) -> Path:
    """The config and tokenizer of a tiny Llama as transformers writes them (no weights:
    from_hf reads none)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    vocabulary = {"<s>": 0, "</s>": 1, "a": 2, "b": 3}
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="a"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>").save_pretrained(directory)
    LlamaConfig(
        vocab_size=len(vocabulary),
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    ).save_pretrained(directory)
    return directory


def test_levanters_from_hf_reaches_the_hub_for_a_local_llama_without_the_patch(tmp_path: Path) -> None:
    checkpoint = _llama_checkpoint(tmp_path / "llama")
    env = cli_env() | {
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf-home"),  # an empty cache: nothing of gpt2's is at hand
        "HF_HUB_CACHE": str(tmp_path / "hf-home" / "hub"),
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, "-c", FROM_HF, str(checkpoint)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    before, patched, after = json.loads(done.stdout.splitlines()[-1])
    # Levanter's own: gpt2's default config, the first family it tries, wants its reference from the Hub.
    assert isinstance(before, str) and "huggingface.co" in before, before
    assert patched == 8  # the converter lora_lm is given: the checkpoint's own config
    assert after == before  # Levanter's, back


# -- quiet_tokenizer_name: a token cache's tokenizer, named otherwise by its reader ------------


def _token_cache(directory: Path, tokenizer: Path, name: str | None) -> None:
    """Both splits of a cache of one document, as `tokenize` writes them: its tokenizer
    named `name` (tokenize's fixed name) instead of by its path."""
    from levanter.data.text import TextLmDatasetFormat, preprocessor_for_format
    from levanter.store.cache import CacheMetadata, SerialCacheWriter
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(str(tokenizer))
    if name is not None:
        loaded.name_or_path = name
    processor = preprocessor_for_format(TextLmDatasetFormat(text_key="text"), loaded)
    for split in ("train", "validation"):
        metadata = CacheMetadata(preprocessor_metadata=processor.metadata)
        with SerialCacheWriter(str(directory / split), processor.output_exemplar, metadata=metadata) as writer:
            writer.write_batch(processor([{"text": "a b a"}]))


def _mismatches(caplog: pytest.LogCaptureFixture, caches: Path, tokenizer: Path) -> list[str]:
    """The "Metadata mismatch" warnings of loading the validation caches as train_lm and
    eval_lm do (their Levanter data config), with the tokenizer at `tokenizer`."""
    from rules.common.levanter.data import data_config

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="levanter.store.cache"):
        data_config({"tokens": str(caches)}, {"tokens": 1.0}, tokenizer).build_caches("validation")
    return [record.getMessage() for record in caplog.records if "Metadata mismatch" in record.getMessage()]


def test_levanter_warns_of_a_tokenizer_named_otherwise_unless_quiet_tokenizer_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from transformers import AutoTokenizer

    from rules.tokenize.tokenize import TOKENIZER_NAME

    tokenizer = _llama_checkpoint(tmp_path / "tokenizer")
    caches = tmp_path / "tokens"
    _token_cache(caches, tokenizer, TOKENIZER_NAME)
    # Levanter's own: the name is all that differs, and it warns.
    [warning] = _mismatches(caplog, caches, tokenizer)
    assert "preprocessor_metadata['tokenizer']" in warning and str(tokenizer) in warning, warning
    with quiet_tokenizer_name():
        assert _mismatches(caplog, caches, tokenizer) == []
        # Another difference (a vocabulary of another size) is still shown.
        other = AutoTokenizer.from_pretrained(str(tokenizer))
        other.add_tokens(["c"])
        other.save_pretrained(tmp_path / "other")
        _token_cache(tmp_path / "other-tokens", tmp_path / "other", TOKENIZER_NAME)
        assert len(_mismatches(caplog, tmp_path / "other-tokens", tokenizer)) == 1
    assert len(_mismatches(caplog, caches, tokenizer)) == 1  # Levanter's, back
