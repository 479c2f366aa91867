"""The language-model family: `train_lm`, `eval_lm`, `export_hf` and `hf_model`.

`decls.py` declares them (a workspace names it in its `rules` setting); `constants.py`
holds what other families' declarations name alike; `train_lm.py`, `eval_lm.py` and
`hf_model.py` are their steps, which run on the Levanter runtime (rules/common/levanter/);
`lm.star` holds the macros of model, resource and tracker dicts and of cooldowns.
"""
