"""The files of the mixture rules' outputs, and their defaults."""

TABLE_FILE = "swarm.json"  # mixture_table: every run's weights and losses
RATIOS_CSV = "ratios.csv"  # the same table as Olmix reads it: a run's weights a row...
METRICS_CSV = "metrics.csv"  # ...and its losses a row
FIT_FILE = "fit.json"  # mixture_fit: the law, its leave-one-out error, the proposal
CHECK_FILE = "validation.json"  # mixture_check: the proposal against the references, per scale
SWARM_PLOT = "swarm.png"
PREDICTED_PLOT = "predicted.png"
VALIDATION_PLOT = "validation.png"
