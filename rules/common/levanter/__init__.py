"""The Levanter runtime the language-model families run on (train_lm, eval_lm, export_hf,
eval_harness, sft_lm): their Levanter configs made from BUILD attributes (`configs`,
`data`), one training loop that resumes after a kill and publishes what it keeps
(`training`, `kept_states`, `metrics`), the optimizer and trackers Levanter is given
(`optim`, `trackers`), the Hugging Face export and its checks (`hf_export`), and every
patch of a library (`library_patches`).

Its modules import JAX and Levanter, so only a running step (or a benchmark) imports
them; each imports `environment` first, which keeps the process offline before anything
imports transformers or huggingface_hub (pyproject.toml sorts that import first). This
file imports nothing: finding a module's code for its digest imports its package.
"""
