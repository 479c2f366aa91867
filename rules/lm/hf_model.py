"""`hf_model`'s step: a checkpoint in Hugging Face format brought into the store, from the
Hub at a pinned commit (rules/common/hub.py) or from a target holding one, checked before
it is published (rules/common/hf_format.py: its files, the safetensors headers, the
weights' shapes against config.json). Its output is the checkpoint directory itself, plus
`summary.json` saying where it came from."""

from __future__ import annotations

import json
import shutil

from marinbuild.targets.context import Context
from rules.common.corpus import SUMMARY
from rules.common.hf_format import CHECKPOINT_FILES, check_checkpoint, checkpoint_directory
from rules.common.hub import resolved_commit, snapshot


def copy_checkpoint(ctx: Context) -> None:
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
