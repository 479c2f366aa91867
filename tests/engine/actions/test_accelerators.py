"""A step that asks for an accelerator this machine lacks does not run here silently.

Before: a target with `gpu("H100", 8)` ran on a CPU-only machine without a word (JAX
fell back to the CPU). Now a local build stops with exit 2 before anything runs, naming
the step, what it asks for, and the way out (`--executor ray`, `--allow-cpu`); a dry run
notes it; a cached step asking for one is no problem. The machine's accelerators are set
by MARINBUILD_ACCELERATORS here, so the test means the same on any machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cli_env, run_cli

from marinbuild.actions.execution.accelerators import Accelerators, missing, parse
from marinbuild.errors import WorkspaceError
from marinbuild.targets.rule import Resources

GPU_STEP = {
    "pkg/BUILD.marin": """\
    genrule(name = "prep", outs = ["p.txt"], cmd = "echo p > $@")
    genrule(
        name = "train",
        srcs = [":prep"],
        outs = ["t.txt"],
        cmd = "cat $< > $@",
        resources = {"accelerator": "H100", "accelerator_count": 8, "cpu": 1},
    )
    """
}


def _cli(ws: Path, *args: str, machine: str) -> tuple[int, str, str]:
    return run_cli(ws, *args, env={**cli_env(), "MARINBUILD_ACCELERATORS": machine})


def test_a_step_whose_accelerator_this_machine_lacks_stops_a_local_build(make_workspace):
    ws = make_workspace(GPU_STEP)
    rc, out, err = _cli(ws, "build", "//pkg:all", machine="none")
    assert rc == 2, err
    assert "//pkg:train asks for 8 H100 GPUs, but this machine has no GPU or TPU" in err
    assert "--executor ray" in err and "--allow-cpu" in err
    assert not (ws / "cache" / "ac").exists()  # nothing ran, not even what it depends on

    rc, out, err = _cli(ws, "build", "--dry-run", "//pkg:all", machine="gpu:A100:8")
    assert rc == 0 and "needs 8 H100 GPUs, which this machine lacks" in out, out

    rc, out, err = _cli(ws, "build", "--json", "--allow-cpu", "//pkg:all", machine="none")
    assert rc == 0, err
    assert {item["status"] for item in json.loads(out)["targets"]} == {"built"}
    # Built: asking for a GPU is no reason to stop a build that does not run it.
    rc, out, err = _cli(ws, "build", "//pkg:all", machine="none")
    assert rc == 0, err


def test_a_machine_with_the_accelerator_runs_it(make_workspace):
    ws = make_workspace(GPU_STEP)
    rc, out, err = _cli(ws, "build", "//pkg:all", machine="gpu:NVIDIA H100 80GB HBM3:8")
    assert rc == 0, err


def test_what_a_machine_lacks():
    h100 = Resources(accelerator="H100", accelerator_count=8)
    assert missing(h100, Accelerators()) == "8 H100 GPUs"
    assert missing(h100, Accelerators(("NVIDIA H100 80GB HBM3",) * 8)) is None
    assert missing(h100, Accelerators(("NVIDIA H100 80GB HBM3",) * 4)) == "8 H100 GPUs"
    assert missing(Resources(accelerator="A100"), Accelerators(("NVIDIA H100 80GB HBM3",))) == "1 A100 GPU"
    assert missing(Resources(accelerator="H100"), Accelerators(("",))) is None  # kind unknown: any
    assert missing(Resources(accelerator="v5p-64"), Accelerators()) == "TPU v5p-64"
    assert missing(Resources(accelerator="v5p-64"), Accelerators(tpu_chips=4)) is None
    assert missing(Resources(), Accelerators()) is None
    assert parse("gpu:H100:2, tpu:4") == Accelerators(("H100", "H100"), 4)
    assert parse("none") == Accelerators()
    with pytest.raises(WorkspaceError, match="gpu:KIND"):
        parse("cuda")
