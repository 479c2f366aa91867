"""The scaling-law family: `fit_scaling_law`, and the macros that declare the sweeps it
fits (`scaling.star`: recipes, isoFLOP sweeps, held-out runs).

`decls.py` declares the rule (a workspace names it in its `rules` setting) and
`constants.py` names its output's files; `runs.py` reads the runs, `laws.py` fits the
laws on `arithmetic.py`, `fit.py` makes fit.json of them and `plots.py` draws it.
"""
