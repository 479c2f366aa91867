"""A local Ray cluster for the tests: 2 CPUs on this machine, one per test worker.

It is held by a child process that started it with `ray.init`, so that ending that
process (and nothing else) shuts down the cluster; builds connect to it as drivers with
`--ray-address`. Ray's token authentication is turned off for it (RAY_AUTH_MODE, which
the builds inherit): it listens on this machine only, for the length of the tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

_HOLDER = """
import json, sys, ray
ray.init(
    address="local", num_cpus=2, include_dashboard=False, _memory=8 * 2**30, object_store_memory=256 * 2**20,
    **json.loads(sys.argv[1]),
)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()
"""


class LocalRayCluster:
    """`resources`: more of `ray.init`'s arguments, such as GPUs the node claims to have
    (`num_gpus`, and `resources={"accelerator_type:H100": 1}` for their kind): Ray hands
    them out by count, without looking for the devices."""

    def __init__(self, **resources: Any) -> None:
        os.environ["RAY_AUTH_MODE"] = "disabled"
        self.process = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, json.dumps(resources)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.address = self.process.stdout.readline().strip()
        assert self.address, "the Ray cluster did not start"

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()  # the holder's ray.shutdown() ends the cluster's processes
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
