"""The web-data blocks, each a small typed function over a stream of `documents.Document`s
with its parameters a dataclass checked when made (`parameters`): a generated raw corpus
(`raw_corpus/`), raw pages to documents (`extract`, with `http_body`, `charsets` and
`extract_worker`), documents to kept documents (`filters/`), fastText classifiers
(`fasttext`, `quality`), deduplication across shards (`dedup/`), and the distribution of
the scores a cut is made on (`score_distribution`).
"""
