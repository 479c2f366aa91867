"""The web-data family: from raw web pages to a clean corpus.

`decls.py` declares its rules (a workspace names it in its `rules` setting) and
`constants.py` holds the names both sides read. Each rule's step is the module of its name
(`extract_text`, `filter_text`, `train_fasttext`, `train_quality_classifier`,
`score_quality`, `dedup`, `translated_phrases`): the sharded ones list their units there,
by the module's path, which each unit's key holds. The steps are loops over the blocks of
`blocks/`, each a small typed function over a stream of documents.
"""
