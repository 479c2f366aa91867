"""Where each attempt ran on a Ray cluster: its record names the executor, the node (its
id and address) and the accelerators Ray gave it, failed attempts too, and `show`,
`history`, `log --list` and the report say so (marinbuild/actions/bookkeeping/machines.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from conftest import attempt_records, build_json, cli_env, run_cli, statuses
from ray_cluster import LocalRayCluster

from marinbuild.report.blocks import step_file

STEPS = """
def fails(ctx):
    raise RuntimeError("this step breaks on the node")
"""

BUILD = """
genrule(name = "words", outs = ["words.txt"], cmd = "echo the quick brown fox > $@")
py_step(name = "breaks", fn = "steps.py:fails")
"""


def _nodes(address: str) -> list[dict]:
    """The cluster's live nodes as Ray itself lists them to a driver of its own."""
    code = (
        f"import json, ray; ray.init(address={address!r}, log_to_driver=False); "
        "print(json.dumps([node for node in ray.nodes() if node['Alive']]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _ray(address: str, *args: str) -> tuple[str, ...]:
    return ("--executor", "ray", "--ray-address", address, *args)


def test_an_attempt_on_ray_names_its_node_failed_or_not(make_workspace, ray_cluster, tmp_path) -> None:
    ws = make_workspace({"pkg/BUILD.marin": BUILD, "pkg/steps.py": STEPS})
    data = build_json(ws, *_ray(ray_cluster, "-k", "//pkg:all"), expect_rc=1)
    assert statuses(data) == {"//pkg:words": "built", "//pkg:breaks": "failed"}
    (node,) = _nodes(ray_cluster)
    node_id, ip, host = node["NodeID"], node["NodeManagerAddress"], socket.gethostname()
    # A CPU-only node gives no accelerator: the record says so (an empty count), not nothing.
    machine = {"host": host, "ip": ip, "node_id": node_id, "accelerators": {}}
    for label, status in (("//pkg:words", "succeeded"), ("//pkg:breaks", "failed")):
        (record,) = attempt_records(ws / "cache", data["by_label"][label]["key"])
        assert (record["status"], record["executor"], record["ran_on"]) == (status, "ray", [machine])
        assert record["host"] == host  # the builder's, as before
    assert "this step breaks on the node" in data["by_label"]["//pkg:breaks"]["reason"]

    rc, out, err = run_cli(ws, "show", "//pkg:words", "--json")
    assert rc == 0, err
    assert json.loads(out)["provenance"]["ran_on"] == [machine]
    rc, out, err = run_cli(ws, "show", "//pkg:words")
    assert rc == 0, err
    assert "    executor: ray\n" in out
    assert f"    ran on: {ip} (node {node_id}, host {host}), no accelerator\n" in out

    rc, out, err = run_cli(ws, "history")
    assert rc == 0, err
    where = f"on ray: {ip} (node {node_id[:12]}, host {host}), no accelerator"
    assert out.count(where) == 2, out
    rc, out, err = run_cli(ws, "log", "--list", "//pkg:breaks")
    assert rc == 0 and where in out, out + err

    rc, out, err = run_cli(ws, "report", "//pkg:all", "-o", str(tmp_path / "report"))
    assert rc == 0, err
    page = (tmp_path / "report" / "steps" / step_file("//pkg:breaks")).read_text()
    assert f"<th>ran on</th><td>ray: {ip} (node {node_id}, host {host}), no accelerator</td>" in page
    index = (tmp_path / "report" / "index.html").read_text()
    assert index.count(f"ray: {ip} (node {node_id[:12]}, host {host}), no accelerator") == 3  # failure, 2 rows


@pytest.fixture(scope="module")
def gpu_cluster():
    """A cluster whose one node claims an H100: Ray hands it out by count as it would a real one."""
    cluster = LocalRayCluster(num_gpus=1, resources={"accelerator_type:H100": 1})
    yield cluster.address
    cluster.stop()


def test_an_attempt_on_ray_records_the_accelerators_it_got(make_workspace, gpu_cluster) -> None:
    build = (
        'genrule(name = "on_gpu", outs = ["x.txt"], cmd = "echo ok > $@", '
        'resources = {"accelerator": "H100", "accelerator_count": 1})\n'
    )
    ws = make_workspace({"pkg/BUILD.marin": build})
    data = build_json(ws, *_ray(gpu_cluster, "//pkg:on_gpu"))
    (node,) = _nodes(gpu_cluster)
    (record,) = attempt_records(ws / "cache", data["by_label"]["//pkg:on_gpu"]["key"])
    assert record["ran_on"] == [
        {
            "host": socket.gethostname(),
            "ip": node["NodeManagerAddress"],
            "node_id": node["NodeID"],
            "accelerator_type": "H100",
            "accelerators": {"GPU": 1.0},
        }
    ]
    rc, out, err = run_cli(ws, "show", "//pkg:on_gpu")
    assert rc == 0 and f"host {socket.gethostname()}), 1 GPU H100\n" in out, out + err
