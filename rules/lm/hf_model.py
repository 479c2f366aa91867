"""Hugging Face checkpoints out and in: `export_hf` and `hf_model`.

`export_hf` writes a trained model (a `train_lm` output, or a state it keeps) in the
format the rest of the world loads — `transformers.AutoModelForCausalLM.from_pretrained`
on the output directory — by Levanter's own export (`rules/levanter_lm.py`). It is the one
way to get that format: `train_lm` writes none itself, so a sweep stores no copy of the
weights it will never publish.

`hf_model` brings a checkpoint in that format into the store as an input, from the Hub at
a pinned commit (like `hf_dataset`, `rules/hub.py`) or from a target holding one (an
`export_hf` output, a filegroup), checked before it is published (`rules/hf_format.py`:
its files, the safetensors headers, the weights' shapes against config.json):
`train_lm(init_from_hf = ":base")` starts from its weights. Its output is the checkpoint
directory itself, plus `summary.json` saying where it came from.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

from marinbuild.targets import attrs as types
from marinbuild.targets.attrs import Attr, JsonValue
from marinbuild.targets.context import Context
from marinbuild.targets.rule import Execution, Resources, Rule, StepInput, checkpoint_name
from rules.hf_format import CHECKPOINT_FILES, check_checkpoint, checkpoint_directory
from rules.hub import ALLOW_UNPINNED, HUB_ENV, NO_TORCH, check_pinned, resolved_commit, snapshot
from rules.lm import LEVANTER_MODULES, ML_PACKAGES, check_kept_step
from rules.lm_config import FAMILIES

SUMMARY = "summary.json"

# -- export_hf ------------------------------------------------------------------------------


def _export_hf(ctx: Context) -> None:
    from rules import levanter_lm

    model, step = ctx.attrs["model"], ctx.attrs["step"]
    levanter_lm.export(ctx.url(model if step is None else checkpoint_name(model, step)), ctx.out, ctx.tmp)


def _export_headline(out: Path) -> str | None:
    return "a Hugging Face checkpoint: config.json, model.safetensors, the tokenizer (AutoModelForCausalLM)"


export_hf = Rule(
    name="export_hf",
    impl=_export_hf,
    doc="A train_lm model (its last step, or a step it keeps) as a Hugging Face checkpoint: config.json, "
    "model.safetensors and the tokenizer, which transformers loads offline.",
    headline=_export_headline,
    validate=check_kept_step,
    attrs={
        "model": Attr(types.LABEL, doc="A train_lm target."),
        "step": Attr(
            types.INT,
            default=None,
            doc="None: the model's last step; else a step it keeps (keep_checkpoints), exported once written.",
        ),
    },
    execution=Execution.SUBPROCESS,
    resources=Resources(cpu=1, memory_gb=4),
    reads_urls=True,
    packages=(*ML_PACKAGES, "transformers", "safetensors"),
    env=(NO_TORCH,),
    code_modules=LEVANTER_MODULES,
    step_inputs={"model": StepInput("step", "a train_lm target that keeps that step")},
)


# -- hf_model -------------------------------------------------------------------------------


def _hf_model(ctx: Context) -> None:
    attrs = ctx.attrs
    if attrs["hub"] is not None:
        directory = snapshot(attrs["hub"], attrs["revision"], "model", allow_patterns=CHECKPOINT_FILES)
        source = {"repo": attrs["hub"], "commit": resolved_commit(directory)}
        shown = f"{attrs['hub']} at {source['commit']}"
    else:
        directory = checkpoint_directory(ctx.files(attrs["dir"]))
        source = {"dir": attrs["dir"]}
        shown = attrs["dir"]
    config = check_checkpoint(directory, attrs["family"], shown)
    files = sorted({path for pattern in CHECKPOINT_FILES for path in directory.glob(pattern) if path.is_file()})
    for path in files:  # a Hub snapshot's files are links into its blobs: copy their bytes
        shutil.copyfile(path, ctx.out / path.name)
    summary = {
        "family": attrs["family"],
        "source": source,
        "files": [path.name for path in files],
        "vocab_size": config.get("vocab_size"),
    }
    (ctx.out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    ctx.log.info("%s: %s", shown, summary)


def _validate_hf_model(attrs: Mapping[str, JsonValue]) -> None:
    if (attrs["hub"] is None) == (attrs["dir"] is None):
        raise ValueError("give exactly one of hub (with revision) and dir")
    if attrs["hub"] is not None and attrs["revision"] is None:
        raise ValueError("a Hub checkpoint needs revision: the 40-hex commit id to use")
    if attrs["hub"] is None and attrs["revision"] is not None:
        raise ValueError("revision goes with hub; a dir checkpoint is identified by its files' digests")
    if attrs["family"] not in FAMILIES:
        raise ValueError(
            f"family must be one of {list(FAMILIES)} (the families train_lm trains), got {attrs['family']!r}"
        )
    check_pinned(attrs)


def _hf_model_headline(out: Path) -> str | None:
    try:
        summary = json.loads((out / SUMMARY).read_text())
    except (OSError, ValueError):
        return None
    return f"a {summary['family']} checkpoint in Hugging Face format ({', '.join(summary['files'])})"


hf_model = Rule(
    name="hf_model",
    impl=_hf_model,
    doc="A checkpoint in Hugging Face format as an input: from the Hub at a pinned commit, or from a target "
    "holding one (export_hf, a filegroup); checked (config.json of the family, tokenizer.json, safetensors "
    "weights whole and of the shapes config.json implies) and copied as it is, with summary.json.",
    headline=_hf_model_headline,
    validate=_validate_hf_model,
    attrs={
        "hub": Attr(types.STRING, default=None, doc="'org/name' of a model repository on the Hub."),
        "revision": Attr(types.STRING, default=None, doc="A 40-hex commit id (a branch needs allow_unpinned)."),
        "dir": Attr(types.OPTIONAL_LABEL, default=None, doc="A target or filegroup holding a checkpoint directory."),
        "family": Attr(
            types.STRING,
            default="llama",
            doc="Its model family (llama, mixtral, qwen, olmo2), whose Hugging Face model_type its config.json "
            "must say (qwen: qwen2).",
        ),
        "allow_unpinned": ALLOW_UNPINNED,
    },
    # 2: safetensors headers, index and shapes checked before publishing (issue #35): a
    # checkpoint cached before is checked again; one that passes gives the same bytes, so
    # nothing downstream reruns (early cutoff).
    version=2,
    execution=Execution.SUBPROCESS,
    env=HUB_ENV,
    packages=("huggingface_hub",),
    code_modules=("rules.hf_format",),
)
