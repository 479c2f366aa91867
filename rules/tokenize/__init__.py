"""The tokenizer family: `bpe_tokenizer`, `hf_tokenizer` and `tokenize`.

`decls.py` declares them (a workspace names it in its `rules` setting); `constants.py`
holds what a tokenizer directory is made of; `tokenizers.py` and `tokenize.py` are their
steps.
"""
