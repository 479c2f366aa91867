"""Per-step loggers: every line a step logs goes to its attempt's log file in the store."""

from __future__ import annotations

import logging
from pathlib import Path

_FORMAT = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%S")


def step_logger(label: str, log_path: Path) -> logging.Logger:
    """A logger writing to `log_path` only. Not registered globally: thousands of steps
    must not leave thousands of loggers behind."""
    logger = logging.Logger(f"marinbuild.step {label}", logging.INFO)
    handler = logging.FileHandler(log_path)
    handler.setFormatter(_FORMAT)
    logger.addHandler(handler)
    return logger


def close_logger(logger: logging.Logger) -> None:
    for handler in list(logger.handlers):
        handler.close()
        logger.removeHandler(handler)
