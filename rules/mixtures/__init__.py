"""The data-mixture family: a swarm of small runs on random mixtures, a regression from
mixture weights to a target loss, the mixture it proposes, and the runs that check it
(RegMix, Olmix; docs/mixtures.md).

`mixtures.star` holds the macros a BUILD file calls (`mixture_swarm`, `fit_mixture`,
`validate_mixture`); `decls.py` declares the rules they expand to; `constants.py` names
their files. The steps: `draws.py` draws a run's mixture, `table.py` gathers the swarm's
weights and losses, `fit.py` fits and proposes (on `regression.py` and `proposer.py`),
`check.py` sets the validation runs against the fit, `plots.py` draws them and `report.py`
is the report's mixture page.
"""
