"""Blocks of the web-data rules, each a small typed function over a stream of
`documents.Document`s: a generated raw corpus (`raw_corpus`), raw pages to documents
(`extract`), documents to kept documents (`filters`), a quality classifier trained and
scoring documents (`quality`), and deduplication across shards (`dedup`: a map per shard,
a reduce, an apply per shard). Every block's parameters are typed dataclasses checked when
made (`parameters`).

`filters`, `dedup_config` and `quality` are imported when BUILD files load (parameters are
checked there), so they import no heavy library at top level (numpy and fastText are
imported where used); `extract`, `raw_corpus` and `dedup` import Resiliparse, FastWARC,
warcio and numpy, and are imported by the steps that run them.
"""
