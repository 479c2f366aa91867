"""`sft_lm`'s step on Levanter: the base checkpoint, the chat caches, and the fine-tuning run.

The run is Levanter's own: `levanter.main.train_lm` from the base's Hugging Face weights
(`initialize_from_hf`) on data in Levanter's chat format, or `levanter.main.lora_lm` with
LoRA; both through the runtime's `run_training`, as train_lm, so metrics, checkpoints and
resuming after a kill are train_lm's. The base is of any family train_lm trains (its
config.json's `model_type` says which, and that family's Levanter converter reads it):
Levanter's entry points start from each as from a Llama. The chat format renders each
conversation with the chat template and keeps, per token, whether it lies in the
template's `{% generation %}` block (transformers' `return_assistant_tokens_mask`); the
loss mask of an example is that mask shifted by one (a position counts when the token it
predicts is the assistant's), so no token of a prompt ever counts in the loss.

The chat caches are written here rather than by Levanter, with the processor Levanter
reads them with (`preprocessor_for_format`), so that every line is checked first and a
bad one fails the step with one line naming it (not a traceback from a cache-building
thread), and so that no Ray instance starts (as `tokenize` does: `rules/tokenize/tokenize.py`).
They are written once per key into its scratch space, which a resumed attempt reuses.
"""

from __future__ import annotations

import rules.common.levanter.environment  # noqa: F401  (first: offline, before Levanter)

import dataclasses
import enum
import json
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import fsspec
import jax
import jax.numpy as jnp
from haliax.util import is_named_array
from jinja2 import TemplateError
from levanter.checkpoint import load_checkpoint, save_checkpoint
from levanter.compat.hf_checkpoints import HFCheckpointConverter, HFCompatConfig
from levanter.data.text import ChatLmDatasetFormat, preprocessor_for_format
from levanter.lora import LoraConfig, lora_trainable_params_filter, loraize, merge_lora_modules
from levanter.main import lora_lm
from levanter.main import train_lm as levanter_train_lm
from levanter.store.cache import CacheMetadata, SerialCacheWriter
from levanter.utils.jax_utils import local_cpu_mesh
from transformers import AutoConfig, AutoTokenizer

from marinbuild.targets.context import StepFailed
from rules.common import lm_config
from rules.common.corpus import SPLITS, json_lines
from rules.common.hf_format import CONFIG, check_checkpoint
from rules.common.levanter.configs import CONFIG_CLASSES, model_config, optimizer_config, trainer_config
from rules.common.levanter.data import data_config, local_copy
from rules.common.levanter.hf_export import architecture_differences, export
from rules.common.levanter.kept_states import fix_checkpoint_timestamp
from rules.common.levanter.library_patches import converter_for_every_checkpoint, router_metrics
from rules.common.levanter.training import Places, RunInfo, Trained, Training, in_scratch, launch_train_lm, run_training
from rules.common.training_files import CHECKPOINT, MODEL_FILE
from rules.posttrain.constants import GENERATION_TAG, MESSAGES, chat_problem
from rules.tokenize.constants import TOKENIZER_FILES

# The tokenizer's files that go into the output's tokenizer/ (config.json is the model's).
_TOKENIZER_FILES = [name for name in TOKENIZER_FILES if name != "config.json"]
_TOKENIZER_CONFIG = "tokenizer_config.json"
# The conversations the processor renders and tokenizes at once.
_BATCH = 256
# In the key's scratch space: the chat caches (complete once renamed there) and the
# tokenizer they were made with, at a path that stays the same from one attempt to the
# next (the caches record it).
_CHAT_CACHES = "chat-caches"
_CHAT_TOKENIZER = "chat-tokenizer"


@dataclasses.dataclass(frozen=True)
class FineTuneRequest:
    """One sft_lm step: the target's `attrs`, where the base lies (`model`: a Hugging Face
    checkpoint, or a train_lm/sft_lm output), where the chat set lies (`data`: {label:
    location}), where it works, and, with `run`, where its progress lines go."""

    attrs: Mapping[str, Any]
    model: str
    data: Mapping[str, str]
    places: Places
    run: RunInfo | None = None
    started: float | None = None


@dataclasses.dataclass(frozen=True)
class FineTuning:
    """A fine-tuning run ready to start: the config of Levanter's entry point, and `launch`,
    which runs that entry point on it (what bench/train_overhead.py times against the whole
    step); what `run_training` records of it (the model's fields, the trainer); the
    tokenizer it trains with; and, for a LoRA run, `merge`, which turns the adapters its
    checkpoint holds into the merged model."""

    config: levanter_train_lm.TrainLmConfig | lora_lm.LoraLmConfig
    launch: Callable[[], None]
    recorded: dict[str, Any]
    tokenizer: Path
    merge: Callable[[Path], None] | None


def fine_tuning(request: FineTuneRequest) -> FineTuning:
    """The fine-tuning run of the request, its checkpoints and chat caches in the scratch
    space: the base in Hugging Face format, its chat tokenizer, the chat caches (every line
    checked), and Levanter's config."""
    scratch, tmp = request.places.scratch, request.places.tmp
    attrs = {
        **request.attrs,
        **{kind: lm_config.resolve(kind, request.attrs[kind]) for kind in ("optimizer", "trainer")},
    }
    base, family = _hf_base(request.model, tmp)
    tokenizer, template = _chat_tokenizer(base, attrs["chat_template"], scratch / _CHAT_TOKENIZER)
    fields = _model_fields(base, family, attrs["seq_len"], tokenizer, tmp)
    chat_format = ChatLmDatasetFormat(messages_field=MESSAGES, chat_template=template, mask_user_turns=True)
    caches = chat_caches(request.data, tokenizer, chat_format, fields["seq_len"], scratch / _CHAT_CACHES, request.run)
    trainer = trainer_config(in_scratch(attrs["trainer"], attrs["seed"], request.places, request.run))
    dataset = data_config(caches, {tag: 1.0 for tag in caches}, tokenizer, chat_format)
    levanter_model = model_config(fields, tokenizer, tmp)
    optimizer = optimizer_config(attrs["optimizer"])
    recorded = {"model": fields, "trainer": attrs["trainer"]}
    lora = attrs["lora"]
    if lora is None:
        full = levanter_train_lm.TrainLmConfig(
            data=dataset, model=levanter_model, optimizer=optimizer, trainer=trainer, initialize_from_hf=str(base)
        )
        return FineTuning(full, lambda: launch_train_lm(full), recorded, tokenizer, None)
    converter = levanter_model.hf_checkpoint_converter().replaced(reference_checkpoint=str(base))
    adapters = LoraConfig(**lora)
    low_rank = lora_lm.LoraLmConfig(
        initialize_from_hf=str(base),
        lora=adapters,
        data=dataset,
        trainer=trainer,
        optimizer=optimizer,
        max_train_length=fields["seq_len"],
    )
    return FineTuning(
        low_rank,
        lambda: _lora_main(low_rank, converter, levanter_model),
        recorded,
        tokenizer,
        lambda checkpoint: merge_adapters(checkpoint, converter, levanter_model, adapters),
    )


def fine_tune(request: FineTuneRequest) -> Trained:
    """Fine-tune (or resume) into the scratch space, then write the outputs of `sft_lm` (a
    LoRA run's checkpoint the merged model)."""
    started = request.started or time.time()
    prepared = fine_tuning(request)
    trained = run_training(
        Training(
            config=prepared.config,
            launch=prepared.launch,
            recorded=prepared.recorded,
            tokenizer=prepared.tokenizer,
            places=request.places,
            started=started,
            log=None if request.run is None else request.run.log,
        )
    )
    if prepared.merge is not None:
        prepared.merge(request.places.out / CHECKPOINT)
    return trained


# -- the base model -------------------------------------------------------------------------


def _hf_base(model: str, tmp: Path) -> tuple[Path, lm_config.Family]:
    """The local directory of the base in Hugging Face format, and its family: the checkpoint
    itself, or a trained model exported by export_hf's code (its float32 weights, exactly).
    A checkpoint of a family train_lm does not train fails here, before any work."""
    fs, root = fsspec.core.url_to_fs(model)
    if fs.exists(f"{root}/{MODEL_FILE}"):
        local = tmp / "exported"
        export(model, local, tmp)
    else:
        local = local_copy(model, tmp / "hf-base")
    family = _base_family(local)
    check_checkpoint(local, family.name, "model")
    return local, family


def _base_family(checkpoint: Path) -> lm_config.Family:
    """The family of a Hugging Face checkpoint, by the `model_type` of its config.json: one
    of those train_lm trains (rules/common/lm_config.py), which Levanter's `train_lm` and `lora_lm`
    start from as they do from a Llama."""
    try:
        config = json.loads((checkpoint / CONFIG).read_text())
    except (OSError, ValueError):
        config = None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    for family in lm_config.FAMILIES.values():
        if family.hf_model_type == model_type:
            return family
    if config is None:  # no config.json, or not JSON: check_checkpoint says which
        check_checkpoint(checkpoint, lm_config.DEFAULT_FAMILY, "model")
    supported = ", ".join(f"{family.title} ({family.hf_model_type})" for family in lm_config.FAMILIES.values())
    raise StepFailed(f"model: its {CONFIG} says model_type {model_type!r}; sft_lm fine-tunes {supported}")


def _model_fields(
    base: Path, family: lm_config.Family, seq_len: int | None, tokenizer: Path, tmp: Path
) -> dict[str, Any]:
    """The base's architecture as train_lm's model fields (rules/common/lm_config.py), read from its
    config.json by Levanter's converter (the family's `from_hf_config`; the fields it does
    not read keep their defaults, Levanter's own), with `seq_len` (None: the checkpoint's).
    What those fields cannot hold (another rope, a bias, a head size of its own) is
    refused: the model would not be the checkpoint's."""
    try:
        read = CONFIG_CLASSES[family.name].from_hf_config(AutoConfig.from_pretrained(str(base), local_files_only=True))
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        raise StepFailed(f"model: Levanter cannot read its {CONFIG} as a {family.title}'s: {error}") from None
    fields = {field.name: _json_value(getattr(read, field.name)) for field in family.fields}
    try:
        fields = lm_config.resolve(
            "model", {**fields, lm_config.FAMILY: family.name, "seq_len": seq_len or read.seq_len}
        )
    except ValueError as error:
        raise StepFailed(f"model: its {CONFIG} makes a model train_lm refuses: {error}") from None
    differ = architecture_differences(base, fields, tokenizer, tmp)
    if differ:
        shown = "; ".join(difference for difference, _field in differ)
        raise StepFailed(
            f"model: its {CONFIG} holds what a Levanter {family.title} of train_lm's fields cannot: {shown}"
        )
    return fields


def _json_value(value: Any) -> Any:
    """A Levanter config's value as a model dict holds it: an enum by its value."""
    return value.value if isinstance(value, enum.Enum) else value


def _chat_tokenizer(base: Path, template: str | None, into: Path) -> tuple[Path, str]:
    """The base's tokenizer in `into`, its tokenizer_config.json holding the chat template the
    model is fine-tuned with (None: the tokenizer's own), so that the output's export chats
    as the model was taught; and that template. tokenizer.json is copied as it is: eval_lm
    knows data tokenized with it by its digest."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    for pattern in _TOKENIZER_FILES:
        for path in sorted(base.glob(pattern)):
            shutil.copyfile(path, into / path.name)
    if template is None:
        template = AutoTokenizer.from_pretrained(str(base)).chat_template
        if not isinstance(template, str):
            raise StepFailed("the model's tokenizer has no chat template (as one string): give sft_lm a chat_template")
        if not GENERATION_TAG.search(template):
            raise StepFailed(
                "the model's tokenizer's chat template marks no assistant tokens (it has no {% generation %} block): "
                "give sft_lm a chat_template that does"
            )
    settings_file = into / _TOKENIZER_CONFIG
    settings = json.loads(settings_file.read_text()) if settings_file.exists() else {}
    settings_file.write_text(json.dumps({**settings, "chat_template": template}, indent=2) + "\n")
    return into, template


# -- the chat caches ------------------------------------------------------------------------


def chat_caches(
    data: Mapping[str, str],
    tokenizer: Path,
    chat_format: ChatLmDatasetFormat,
    seq_len: int,
    into: Path,
    run: RunInfo | None = None,
) -> dict[str, str]:
    """{tag: cache directory} for the chat sets in `data` ({label: location}), each a
    Levanter chat cache (`train/`, `validation/`) written into `into` unless an earlier
    attempt at the key wrote it. Every line is checked: a conversation (`chat_problem`) the
    template renders, and each split has assistant tokens within the first `seq_len`
    tokens of some conversation; else StepFailed names the line or the split."""
    processor = preprocessor_for_format(chat_format, AutoTokenizer.from_pretrained(str(tokenizer)))
    caches = {}
    for label, location in data.items():
        tag = label.rpartition(":")[2]
        cache = into / tag
        if not cache.is_dir():
            partial = into / f"{tag}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            for split in SPLITS:
                counts = _write_split(label, location, split, processor, seq_len, partial / split)
                if run is not None and run.log is not None:
                    run.log.info("%s %s: %d conversations, %d assistant tokens", label, split, *counts)
            partial.rename(cache)
        caches[tag] = str(cache)
    return caches


def _write_split(label: str, location: str, split: str, processor: Any, seq_len: int, into: Path) -> tuple[int, int]:
    """One split of a chat set as a Levanter chat cache; (conversations, assistant tokens
    within the first seq_len tokens of each)."""
    conversations = assistant_tokens = 0
    metadata = CacheMetadata(preprocessor_metadata=processor.metadata)
    with SerialCacheWriter(str(into), processor.output_exemplar, metadata=metadata) as writer:
        for batch in _batches(_chat_lines(label, location, split)):
            rows = _rendered(processor, batch)
            writer.write_batch(rows)
            conversations += len(rows)
            assistant_tokens += sum(int(row["assistant_masks"][:seq_len].sum()) for row in rows)
    if not conversations:
        raise StepFailed(f"{label} has no conversation in {split}/")
    if not assistant_tokens:
        raise StepFailed(
            f"no conversation of {label}'s {split} split has an assistant token within its first {seq_len} tokens "
            "(seq_len): there is nothing to learn from or evaluate"
        )
    return conversations, assistant_tokens


def _chat_lines(label: str, location: str, split: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, record) for each conversation of one split, checked, in shard order."""
    fs, root = fsspec.core.url_to_fs(location)
    shards = sorted(fs.glob(f"{root}/{split}/*.jsonl"))
    if not shards:
        raise StepFailed(
            f"{label} is not a chat set: no {split}/*.jsonl in its output (chat_data, or a data target "
            'whose lines are {"messages": [...]})'
        )
    for shard in shards:
        name = f"{label}:{shard[len(root) + 1 :]}"
        with fs.open(shard, "r", encoding="utf-8") as lines:
            for number, record in json_lines(lines, name):
                problem = chat_problem(record)
                if problem is not None:
                    raise StepFailed(f"{name}:{number}: {problem}")
                yield f"{name}:{number}", record


def _batches(lines: Iterator[tuple[str, dict[str, Any]]]) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    batch: list[tuple[str, dict[str, Any]]] = []
    for line in lines:
        batch.append(line)
        if len(batch) == _BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _rendered(processor: Callable[[list[dict[str, Any]]], Any], batch: list[tuple[str, dict[str, Any]]]) -> Any:
    """The processor's rows for a batch of conversations; a conversation it cannot render,
    or in which the template marks no token as the assistant's, fails the step naming it."""
    try:
        return processor([record for _where, record in batch])
    except (ValueError, TemplateError):
        pass
    for where, record in batch:  # which one, and why
        try:
            processor([record])
        except TemplateError as error:
            raise StepFailed(f"{where}: the chat template fails on this conversation: {error}") from None
        except ValueError:
            raise StepFailed(
                f"{where}: the chat template marks none of this conversation's tokens as the assistant's: "
                "its {% generation %} block must hold the assistant's messages"
            ) from None
    raise AssertionError("a batch failed whose conversations each pass")


# -- LoRA -----------------------------------------------------------------------------------


def _lora_main(config: lora_lm.LoraLmConfig, converter: HFCheckpointConverter, model: HFCompatConfig) -> None:
    """Levanter's lora_lm, offline: it is given the converter of the base's own config
    (rules/common/levanter/library_patches.py says why it cannot find one itself), and of a Mixtral
    (`model`) it logs the router's statistics as train_lm does, which also lets it
    differentiate the loss."""
    with converter_for_every_checkpoint(converter), router_metrics(model, lora_lm):
        lora_lm.main(config)


def merge_adapters(
    checkpoint: Path, converter: HFCheckpointConverter, model: HFCompatConfig, adapters: LoraConfig
) -> None:
    """Replace a LoRA run's final state in `checkpoint` (its adapters, the only weights it
    trains and saves, and their optimizer state) by the model they make with the base's
    weights, merged: W + (alpha / r) A B for each adapted layer, a checkpoint holding
    `model` only, of the base's architecture — what eval_lm and export_hf read."""
    step = json.loads((checkpoint / "metadata.json").read_text())["step"]
    with local_cpu_mesh():
        base = converter.load_pretrained(model.model_type, config=model, dtype=jnp.float32)
        adapted = loraize(base, adapters, key=jax.random.PRNGKey(0))  # the adapters' values are read back
        trained = eqx.filter(adapted, lora_trainable_params_filter(adapted))
        trained = load_checkpoint(trained, str(checkpoint), subpath="model", discover_latest=False)
        merged = merge_lora_modules(eqx.combine(trained, adapted))
        # A merged weight's axes come out in the order of the adapters' product; the
        # checkpoint stores bare arrays, read back in the order of the base's axes.
        merged = jax.tree_util.tree_map(
            lambda weight, like: weight.rearrange(like.axes) if is_named_array(weight) else weight,
            merged,
            base,
            is_leaf=is_named_array,
        )
    shutil.rmtree(checkpoint)
    save_checkpoint({"model": merged}, step, str(checkpoint), is_temporary=False)
    fix_checkpoint_timestamp(checkpoint / "metadata.json")
