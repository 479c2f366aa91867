"""The web-data rules and their blocks.

Blocks, each a small typed function over a stream of `documents.Document`s: a generated
raw corpus (`raw_corpus`), raw pages to documents (`extract`), documents to kept documents
(`filters`), a quality classifier trained and scoring documents (`quality`), and
deduplication across shards (`dedup`: a map per shard, a reduce, an apply per shard).
Every block's parameters are typed dataclasses checked when made (`parameters`). Rules,
each in a module of its own: raw data every machine has (`local_sources`:
`synthetic_web_pages`, `translated_phrases`), `extract_text`, `filter_text`,
`train_fasttext` (`fasttext_train`), `dedup` (`dedup_rule`), `train_quality_classifier`
and `score_quality` (`quality_rules`).

Rule modules are imported when BUILD files load, so they import no heavy library at top
level; `filters`, `dedup_config` and `quality` are imported there too (parameters are
checked at load), and import numpy and fastText only where used. `extract`, `raw_corpus`
and `dedup` import Resiliparse, FastWARC, warcio and numpy: the steps that run them import
them, and so do the checks of a BUILD file that declares one of their targets.
"""
