"""The post-training family: `chat_data` (a small chat set made offline) and `sft_lm`
(supervised fine-tuning, optionally with LoRA).

`decls.py` declares them (a workspace names it in its `rules` setting); `constants.py`
holds the chat format both sides read; `chat_data.py` and `sft_lm.py` are their steps (the
latter on the Levanter runtime, rules/common/levanter/).
"""
