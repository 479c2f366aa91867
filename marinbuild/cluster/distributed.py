"""JAX distributed initialisation for one process of a multi-host step.

The Ray executor starts one process per host and gives each `ctx.distributed`: the
coordinator (host 0, a free port), the process count and this process's id — what
`jax.distributed.initialize` takes, and what Levanter's `DistributedConfig` passes to it.
On TPU hosts JAX could find these itself; giving them explicitly works everywhere, and
on CPU hosts (several local processes standing in for hosts) it is the only way.
"""

from __future__ import annotations

from typing import Any


def jax_arguments(distributed: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of `jax.distributed.initialize` (and Levanter's DistributedConfig)."""
    return {
        "coordinator_address": distributed["coordinator"],
        "num_processes": distributed["num_processes"],
        "process_id": distributed["process_id"],
    }


def prepare_jax() -> None:
    """Before initialising: CPU devices of several processes talk through gloo (JAX's CPU
    backend has no cross-process collectives otherwise); accelerators ignore this."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")


def initialize_jax(distributed: dict[str, Any] | None) -> None:
    """Join the step's JAX distributed job (nothing to do on one host)."""
    if distributed is None:
        return
    import jax

    prepare_jax()
    jax.distributed.initialize(**jax_arguments(distributed))
