"""The files of a `fit_scaling_law` output."""

FIT_FILE = "fit.json"
ISOFLOPS_PLOT = "isoflops.png"
SCALING_PLOT = "scaling.png"
