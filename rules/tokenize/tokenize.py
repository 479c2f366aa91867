"""`tokenize`'s step: a corpus and a tokenizer become Levanter token caches.

Output layout, matching Levanter's text dataset configs, which read the cache of split
S from `os.path.join(cache_dir, S)`: point `cache_dir` at this output and use the split
names `train` and `validation`.

    train/         a Levanter TreeCache (shard_ledger.json + input_ids arrays)
    validation/    the same for the validation split
    tokenizer/     a copy of the tokenizer directory, so downstream needs only this label
    summary.json   {"documents": {"train": N, "validation": M}, "tokens": {...}}

By default the caches are written without Ray by Levanter's SerialCacheWriter, fed by
the same processor Levanter's Ray path uses (`preprocessor_for_format`); that is much
faster on small data and never leaves Ray processes behind. Inputs of at least
`ray_min_documents` documents use Levanter's Ray cache builder instead, on a private
local Ray instance with one shard group (Levanter's default of 128 waits forever for
CPUs a small machine lacks), shut down when the step ends.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from marinbuild.targets.context import Context
from marinbuild.targets.rule import Resources
from rules.common.corpus import SPLITS, SUMMARY, check_has_documents, corpus_root, read_split, read_summary
from rules.common.training_files import TOKENIZER_DIR
from rules.tokenize.constants import TOKENIZE_RESOURCES
from rules.tokenize.tokenizers import tokenizer_directory

BATCH_DOCUMENTS = 256
# Levanter records the tokenizer's name_or_path in each cache's ledger; a fixed name (the
# copy next to the caches) instead of the input's store path keeps the output deterministic.
TOKENIZER_NAME = TOKENIZER_DIR


def _batches(texts: Iterator[str]) -> Iterator[list[dict[str, str]]]:
    batch: list[dict[str, str]] = []
    for text in texts:
        batch.append({"text": text})
        if len(batch) == BATCH_DOCUMENTS:
            yield batch
            batch = []
    if batch:
        yield batch


def _write_serial(ctx: Context, corpus: Path, split: str, processor: Any, done: int, total: int) -> int:
    """Tokenize one split into a cache with SerialCacheWriter; returns its token count."""
    from levanter.store.cache import CacheMetadata, SerialCacheWriter

    tokens = 0
    metadata = CacheMetadata(preprocessor_metadata=processor.metadata)
    with SerialCacheWriter(str(ctx.out / split), processor.output_exemplar, metadata=metadata) as writer:
        for batch in _batches(read_split(corpus, split)):
            rows = processor(batch)
            writer.write_batch(rows)
            tokens += sum(len(row["input_ids"]) for row in rows)
            done += len(batch)
            ctx.progress(done, total, "docs")
    return tokens


def _write_with_ray(ctx: Context, corpus: Path, split: str, processor: Any) -> int:
    """Tokenize one split with Levanter's Ray cache builder; returns its token count."""
    from levanter.data.sharded_datasource import JsonlDataSource
    from levanter.store.cache import CacheOptions, build_or_load_cache

    shards = sorted(str(path) for path in (corpus / split).glob("shard-*.jsonl"))
    cache = build_or_load_cache(
        str(ctx.out / split),
        JsonlDataSource(shards),
        processor,
        await_finished=True,
        monitors=[],
        options=CacheOptions(num_shard_groups=1),
    )
    # The builder commits its ledger several times and keeps the previous one as a backup.
    (ctx.out / split / "shard_ledger.json.bak").unlink(missing_ok=True)
    return int(cache.store.tree["input_ids"].data_size)


@contextlib.contextmanager
def _local_ray(cpus: float) -> Iterator[None]:
    """A private Ray instance for this step, shut down (with its workers) when it ends."""
    import ray

    ray.init(address="local", num_cpus=max(1, int(cpus)), include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def tokenize(ctx: Context) -> None:
    corpus = corpus_root(ctx.files(ctx.attrs["data"]))
    documents = read_summary(corpus)["documents"]
    check_has_documents(documents, ctx.attrs["data"])
    shutil.copytree(tokenizer_directory(ctx.files(ctx.attrs["tokenizer"])), ctx.out / TOKENIZER_DIR)

    from levanter.data.text import TextLmDatasetFormat, preprocessor_for_format  # seconds: after the checks
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(ctx.out / TOKENIZER_DIR))
    tokenizer.name_or_path = TOKENIZER_NAME
    processor = preprocessor_for_format(TextLmDatasetFormat(text_key="text"), tokenizer)
    total = sum(documents.values())
    use_ray = total >= ctx.attrs["ray_min_documents"]
    tokens: dict[str, int] = {}
    done = 0
    with (
        _local_ray(Resources.from_json(ctx.attrs["resources"], TOKENIZE_RESOURCES).cpu)
        if use_ray
        else contextlib.nullcontext()
    ):
        for split in SPLITS:
            if use_ray:
                tokens[split] = _write_with_ray(ctx, corpus, split, processor)
            else:
                tokens[split] = _write_serial(ctx, corpus, split, processor, done, total)
            done += documents[split]
            ctx.progress(done, total, "docs")
    summary = {"documents": documents, "tokens": tokens, "vocab_size": len(tokenizer)}
    (ctx.out / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    ctx.log.info("tokenized %s documents into %s tokens", documents, tokens)
