"""Blocks of the web-data rules, each a small typed function over a stream of
`documents.Document`s: a generated raw corpus (`raw_corpus`), raw pages to documents
(`extract`), and documents to kept documents (`filters`).

`filters` is imported when BUILD files load (a filter's parameters are checked there), so
it imports no heavy library at top level; `extract` and `raw_corpus` import Resiliparse,
FastWARC and warcio, and are imported by the steps that run them.
"""
