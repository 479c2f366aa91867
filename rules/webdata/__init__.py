"""The web-data rules and their blocks.

Blocks, each a small typed function over a stream of `documents.Document`s: a generated
raw corpus (`raw_corpus`), raw pages to documents (`extract`), and documents to kept
documents (`filters`). Rules, each in a module of its own: raw data every machine has
(`local_sources`: `synthetic_web_pages`, `translated_phrases`), `extract_text`,
`filter_text` and `train_fasttext` (`fasttext_train`).

Rule modules are imported when BUILD files load, so they import no heavy library at top
level; `filters` is imported there too (a filter's parameters are checked at load).
`extract` and `raw_corpus` import Resiliparse, FastWARC and warcio: the steps that run
them import them, and so do the checks of a BUILD file that declares one of their targets
(an extraction's settings, a corpus's rates are theirs).
"""
