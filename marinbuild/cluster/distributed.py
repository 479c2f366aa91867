"""JAX distributed initialisation for one process of a multi-host step.

The Ray executor starts one process per host and gives each `ctx.distributed`: the
coordinator (host 0, a free port), the process count and this process's id — what
`jax.distributed.initialize` takes, and what Levanter's `DistributedConfig` passes to it.
On TPU hosts JAX could find these itself; giving them explicitly works everywhere, and
on CPU hosts (several local processes standing in for hosts) it is the only way.

A step on several TPU slices (`tpu("v5p-64", slices = 2)`) also needs the Megascale
variables that join the slices over the data-centre network: the slice count, each
host's slice id, and a coordinator on the first host of the first slice — the values
Ray's and Marin's TPU launchers set. The processes are numbered slice by slice.
"""

from __future__ import annotations

from typing import Any

MEGASCALE_PORT = 8081  # what libtpu listens on for Megascale by default


def rendezvous(ips: list[str], coordinator_port: int, hosts_per_slice: int) -> list[dict[str, Any]]:
    """`ctx.distributed` of each process of a step, given its hosts' addresses in process
    order (slice by slice) and a free port on the first; `env` is what the process's
    environment must hold before JAX starts (empty on one slice)."""
    slices = len(ips) // hosts_per_slice
    contexts = []
    for rank in range(len(ips)):
        env = {}
        if slices > 1:
            env = {
                "MEGASCALE_COORDINATOR_ADDRESS": f"{ips[0]}:{MEGASCALE_PORT}",
                "MEGASCALE_PORT": str(MEGASCALE_PORT),
                "MEGASCALE_NUM_SLICES": str(slices),
                "MEGASCALE_SLICE_ID": str(rank // hosts_per_slice),
            }
        contexts.append(
            {"coordinator": f"{ips[0]}:{coordinator_port}", "num_processes": len(ips), "process_id": rank, "env": env}
        )
    return contexts


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
