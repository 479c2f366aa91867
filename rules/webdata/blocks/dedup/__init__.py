"""Deduplication of documents across all shards of a corpus: exact, near and paragraph, in
the three phases the `dedup` step runs, a module each: `signatures` (once per shard),
`clusters` (once, over every shard's signatures) and `apply` (once per shard). What dedup
does is checked when BUILD files load (`config`, which imports no numpy).

Choices, by measurement on the generated corpus (bench/dedup.py, docs/benchmarks.md):
MinHash is numpy over a batch of documents, not `datasketch` (its per-document Python
loop and SHA-1 per shingle take 4 times the CPU for the same precision and recall); the
seen paragraphs are an `rbloom` Bloom filter (2% of a set's memory); the defaults
(5-word shingles, 25 bands of 4 rows, threshold 0.6) find the generated near duplicates
(2% of words edited: Jaccard 0.66-0.9 on 5-grams) while pages that share a few
paragraphs (up to about 0.4) stay apart.
"""
