"""What the language-model rules and the families built on them (evals, posttrain) name
alike: the libraries their steps run, the modules of the Levanter runtime (whose digests
every entry records), and the environment of Weights & Biases."""

ML_PACKAGES = ("jax", "jaxlib", "levanter", "haliax", "optax")
LEVANTER_MODULES = (
    "rules.common.levanter.environment",
    "rules.common.levanter.configs",
    "rules.common.levanter.data",
    "rules.common.levanter.training",
    "rules.common.levanter.kept_states",
    "rules.common.levanter.metrics",
    "rules.common.levanter.hf_export",
    "rules.common.levanter.library_patches",
    "rules.common.levanter.optim",
    "rules.common.levanter.trackers",
    "rules.common.lm_config",
    "rules.common.hf_format",
    "rules.common.training_files",
)
# Passed to a training's steps (values of names that look secret, WANDB_API_KEY, are not
# recorded in the attempt).
WANDB_ENV = (
    "WANDB_MODE",
    "WANDB_API_KEY",
    "WANDB_BASE_URL",
    "WANDB_DIR",
    "WANDB_PROJECT",
    "WANDB_ENTITY",
    "WANDB_CONFIG_DIR",
    "WANDB_CACHE_DIR",
    "WANDB_DATA_DIR",
    "WANDB_SILENT",
    "WANDB_CONSOLE",
)
# The metrics file of eval_lm's output.
EVAL_METRICS = "metrics.json"
