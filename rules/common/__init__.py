"""What several rule families share, cheap to import (loading BUILD files imports it).

The corpus layout every data rule writes and the readers of it (`corpus`), Hugging Face
Hub snapshots (`hub`), the interpreter's standard library as an input (`stdlib`), one-line
headlines from a step's JSON summary (`headline`), the schema and ranges of a language
model's dicts (`lm_config`, `ranges`), the checks of a Hugging Face checkpoint's files
(`hf_format`) and the files of a training (`training_files`). `levanter/` is the runtime
the language-model families run on; it imports JAX and Levanter, so only a running step
imports it.
"""
