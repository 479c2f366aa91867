"""The benchmark family, through lm-evaluation-harness: `mc_task` and `eval_harness`.

`decls.py` declares them (a workspace names it in its `rules` setting); `constants.py`
holds the names both sides read; `mc_task.py` and `eval_harness.py` are their steps (the
latter on the Levanter runtime, rules/common/levanter/).
"""
