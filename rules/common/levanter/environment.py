"""The process a step runs Levanter in, set up before Levanter, transformers or
huggingface_hub are imported (they read these settings when they are): offline, since
tokenizers and data come from inputs in the store, never from the Hub; and JAX's
persistent compilation cache keeping every program.

Every module that imports Levanter imports this one first (pyproject.toml's isort
settings put it before every other import).
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import jax  # noqa: E402  (after the environment above)

# marinbuild points JAX_COMPILATION_CACHE_DIR at a directory of this machine. Levanter
# compiles dozens of small programs before the first step, each under JAX's default
# threshold of a second, which together cost more than the training step's own compilation.
if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
