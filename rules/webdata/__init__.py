"""Blocks of the web-data rules: raw pages to documents (extract) and documents to kept documents
(filters), each a small typed function over a stream of `documents.Document`s."""
