"""Provenance: what the store records about how outputs were made, and every try at making them.

    attempts    the attempt records of a key or a label, and their logs
    history     the invocation records (one per build) and the attempts each made
    explain     why a step would run: its recipe against the nearest earlier entry
    show        what made an output: recipe, inputs, provenance, files, metrics
    rerun       the graph that made a key, rebuilt from the store alone; `--check` comparisons

Everything here reads the store only; the action cache and the session write it.
"""

from marinbuild.provenance.attempts import (
    AttemptRecord,
    key_attempts,
    label_attempts,
    last_attempt,
    read_attempt,
    read_log,
)
from marinbuild.provenance.history import HistoryItem, Invocation, TargetOutcome, history, invocations, read_invocation

__all__ = [
    "AttemptRecord",
    "HistoryItem",
    "Invocation",
    "TargetOutcome",
    "history",
    "invocations",
    "key_attempts",
    "label_attempts",
    "last_attempt",
    "read_attempt",
    "read_invocation",
    "read_log",
]
