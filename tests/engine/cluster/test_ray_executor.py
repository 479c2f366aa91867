"""--executor ray: steps run as actors on a local Ray cluster, placed by their resources;
the driver keeps leases, attempt records and publication."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from conftest import attempt_records, build_json, cli_command, cli_env, keys, run_cli, statuses

STEPS = """
import os, time
from pathlib import Path


def upper(ctx):
    text = ctx.location("//pkg:words").read_text()
    ctx.log.info("upper-casing %d characters", len(text))
    (ctx.out / "upper.txt").write_text(text.upper())


def dies_once(ctx):
    marker = Path(ctx.attrs["config"]["marker"])
    if not marker.exists():
        marker.write_text(str(os.getppid()))  # the Ray worker (actor) running this step
        time.sleep(120)
    (ctx.out / "done.txt").write_text("second attempt")


def needs_a_missing_package(ctx):
    import a_package_no_worker_has  # noqa: F401
"""

BUILD = """
genrule(name = "words", outs = ["words.txt"], cmd = "echo the quick brown fox > $@; echo wrote words >&2")
py_step(name = "upper", fn = "steps.py:upper", deps = [":words"])
genrule(name = "count", srcs = [":upper"], outs = ["count.txt"], cmd = "wc -w < $< > $@")
"""


def _ray(address: str, *args: str) -> tuple[str, ...]:
    return ("--executor", "ray", "--ray-address", address, *args)


def test_a_ray_build_matches_a_local_one_and_reruns_nothing(make_workspace, ray_cluster) -> None:
    files = {"pkg/BUILD.marin": BUILD, "pkg/steps.py": STEPS}
    local = build_json(make_workspace(files), "//pkg:all")
    ws = make_workspace(files)
    first = build_json(ws, *_ray(ray_cluster, "//pkg:all"))
    assert statuses(first) == {label: "built" for label in statuses(local)}
    assert keys(first) == keys(local)
    for item in local["targets"]:
        ours = Path(first["by_label"][item["label"]]["output"])
        theirs = Path(item["output"])
        assert {p.name: p.read_bytes() for p in ours.iterdir()} == {p.name: p.read_bytes() for p in theirs.iterdir()}
    assert (Path(first["by_label"]["//pkg:count"]["output"]) / "count.txt").read_text().strip() == "4"
    # The steps' logs streamed back from the workers into the attempt logs in the store.
    log = next((ws / "cache" / "attempts").glob(f"*/{keys(first)['//pkg:words']}/*.log")).read_text()
    assert "wrote words" in log and "marinbuild: running on the Ray cluster: " in log
    again = build_json(ws, *_ray(ray_cluster, "//pkg:all"))
    assert set(statuses(again).values()) == {"cached"}


def test_a_killed_worker_is_retried_and_both_attempts_are_recorded(make_workspace, ray_cluster, tmp_path) -> None:
    marker = tmp_path / "worker.pid"
    build = f'py_step(name = "flaky", fn = "steps.py:dies_once", config = {{"marker": "{marker}"}})\n'
    ws = make_workspace({"pkg/BUILD.marin": build, "pkg/steps.py": STEPS})
    command = cli_command(ws, "build", "--json", *_ray(ray_cluster, "//pkg:flaky"))
    process = subprocess.Popen(
        command, cwd=ws, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not (marker.exists() and marker.read_text()):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.1)
    os.kill(int(marker.read_text()), signal.SIGKILL)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    data = json.loads(out)
    key = data["targets"][0]["key"]
    assert data["targets"][0]["status"] == "built"
    assert (Path(data["targets"][0]["output"]) / "done.txt").read_text() == "second attempt"
    records = sorted(attempt_records(ws / "cache", key), key=lambda record: record["attempt_number"])
    assert [(record["attempt_number"], record["status"], record.get("failure")) for record in records] == [
        (1, "failed", "worker_lost"),
        (2, "succeeded", None),
    ]
    assert "died" in records[0]["error"]
    # The lost attempt names the node it was lost on, as the one that succeeded does.
    assert [len(record["ran_on"][0]["node_id"]) for record in records] == [56, 56]
    assert "trying again" in err


def test_missing_resources_and_imports_fail_their_step_only(make_workspace, ray_cluster) -> None:
    build = (
        BUILD
        + """
genrule(name = "on_gpus", outs = ["x.txt"], cmd = "true > $@", \
resources = {"accelerator": "H100", "accelerator_count": 8})
py_step(name = "imports", fn = "steps.py:needs_a_missing_package")
"""
    )
    ws = make_workspace({"pkg/BUILD.marin": build, "pkg/steps.py": STEPS})
    data = build_json(ws, *_ray(ray_cluster, "--keep-going", "--ray-placement-timeout", "3", "//pkg:all"), expect_rc=1)
    assert statuses(data) == {
        "//pkg:words": "built",
        "//pkg:upper": "built",
        "//pkg:count": "built",
        "//pkg:on_gpus": "failed",
        "//pkg:imports": "failed",
    }
    gpu_error = data["by_label"]["//pkg:on_gpus"]["reason"]
    assert "did not place the step within 3 s" in gpu_error and "8 GPU (H100)" in gpu_error and "2 CPU" in gpu_error
    import_error = data["by_label"]["//pkg:imports"]["reason"]
    assert "No module named 'a_package_no_worker_has'" in import_error
    assert "the cluster's nodes need the step's Python dependencies" in import_error


def test_an_unreachable_cluster_is_a_clear_error_at_once(make_workspace) -> None:
    """Ray itself would retry the address for minutes; nothing is built or recorded."""
    ws = make_workspace({"pkg/BUILD.marin": BUILD, "pkg/steps.py": STEPS})
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
    rc, out, err = run_cli(ws, "build", *_ray(address, "//pkg:all"), timeout=60)
    assert rc == 2, out + err
    assert f"cannot connect to the Ray cluster at {address}" in err and "Connection refused" in err
    assert "hint: start one with 'ray start --head'" in err
    assert not (ws / "cache" / "attempts").exists()


PSUM_RULE = """
import json

from marinbuild.cluster.distributed import initialize_jax
from marinbuild.targets import Execution, Resources, Rule


def _gather(ctx):
    initialize_jax(ctx.distributed)
    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    values = multihost_utils.process_allgather(jnp.array([jax.process_index() + 1.0]))
    ctx.log.info("process %d of %d sees %s", jax.process_index(), jax.process_count(), values.tolist())
    if jax.process_index() == 0:
        result = {"processes": jax.process_count(), "devices": jax.device_count(), "sum": float(values.sum())}
        (ctx.out / "result.json").write_text(json.dumps(result))


gather = Rule(name="gather", impl=_gather, attrs={}, execution=Execution.SUBPROCESS, multi_host=True)
"""


def test_a_multi_host_step_runs_one_jax_process_per_host(make_workspace, ray_cluster) -> None:
    """Two CPU 'hosts' on the local cluster: the launch path of a TPU slice or GPU hosts."""
    ws = make_workspace(
        {"psum_rule.py": PSUM_RULE, "pkg/BUILD.marin": 'gather(name = "sum", resources = {"cpu": 1, "hosts": 2})\n'},
        config='rules = ["psum_rule"]\n',
    )
    data = build_json(ws, *_ray(ray_cluster, "//pkg:sum"))
    result = json.loads((Path(data["by_label"]["//pkg:sum"]["output"]) / "result.json").read_text())
    assert result == {"processes": 2, "devices": 2, "sum": 3.0}
    log = next((ws / "cache" / "attempts").glob("*/*/*.log")).read_text()
    assert "[host 1] " in log and "process 1 of 2 sees [[1.0], [2.0]]" in log
    # Its record names every host it ran on, in rank order (here one node's two actors).
    (record,) = attempt_records(ws / "cache", data["by_label"]["//pkg:sum"]["key"])
    assert [len(machine["node_id"]) for machine in record["ran_on"]] == [56, 56]


def test_a_ray_host_publishes_a_kept_state_while_its_step_runs(make_workspace, ray_cluster, tmp_path) -> None:
    """The keeper waits for a file its reader writes (tests/engine/actions/test_kept_checkpoints.py): the
    build ends at all only if the reader of its state at step 2 ran, on the cluster, while
    the keeper was still running there."""
    from helpers_kept_checkpoints import kept_workspace

    ws = kept_workspace(make_workspace, tmp_path)
    built = build_json(ws, "--jobs", "3", *_ray(ray_cluster, "//p:all"))
    assert set(statuses(built).values()) == {"built"}, built["stderr"]
    assert "published its checkpoint at step 2" in built["stderr"]
    rc, out, err = run_cli(ws, "show", "--json", "//p:count")
    assert rc == 0, err
    count = json.loads(out)
    state = json.loads(run_cli(ws, "show", "--json", count["checkpoints"]["2"])[1])
    assert (
        state["label"] == "//p:count at step 2"
        and state["provenance"]["attempt"] == built["by_label"]["//p:count"]["attempt"]
    )
    # Stored once, as a local run stores it: in its entry, not in the keeper's output.
    assert [item["path"] for item in state["outputs"]] == ["value.txt"]
    assert [item["path"] for item in count["outputs"]] == ["final.txt"]
    assert sorted(path.name for path in (ws / "cache" / "out").rglob("value.txt")) == ["value.txt"]


def test_a_ray_host_publishes_the_states_left_in_its_output_when_its_step_ends(
    make_workspace, ray_cluster, tmp_path
) -> None:
    from helpers_kept_checkpoints import QUIET, assert_published_when_it_ended, kept_workspace

    ws = kept_workspace(make_workspace, tmp_path)
    (ws / "p" / "BUILD.marin").write_text(QUIET)
    assert_published_when_it_ended(ws, build_json(ws, *_ray(ray_cluster, "//p:all")))
