"""The data family: `text_files`, `hf_dataset` and `python_corpus`, corpora from files,
the Hugging Face Hub and the interpreter's standard library.

`decls.py` declares them (a workspace names it in its `rules` setting); `sources.py` holds
their steps. The corpus layout they write is rules/common/corpus.py.
"""
