"""The ML rules of marinbuild: corpora, tokenizers and Levanter token caches.

Each module holds rules a workspace lists in its settings (`rules = ["rules.data"]`).
Loading BUILD files imports these modules, so they import no ML library at top level:
`tokenizers`, `datasets`, `huggingface_hub` and `levanter` are imported inside `impl`,
which runs in its own process (`Execution.SUBPROCESS`).
"""
