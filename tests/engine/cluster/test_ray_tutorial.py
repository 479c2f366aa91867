"""The tutorial's pipeline (corpus, tokenizer, caches, training, evaluation) built with
--executor ray against a GCS store gives the keys and outputs of a local build: the same
key for every step, and under each the same files, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli, statuses
from helpers_lm import PKG, TRAIN_TIMEOUT_S, lm_build, lm_build_file, lm_workspace

from marinbuild.cluster.ray_host import LOCAL_DIR
from marinbuild.store import layout, open_store

# Built on the cluster only: training as two JAX processes, one per (CPU) host, as on a
# TPU slice. Another seed than :model, or its key (resources are not identity) would hit.
TWO_HOSTS = """
train_lm(
    name = "model_on_2_hosts",
    data = ":tokens",
    model = llama(hidden = 32, layers = 1, heads = 2, seq_len = 64),
    trainer = {"steps": 4, "batch_size": 4, "checkpoint_interval": 2, "max_eval_batches": 2},
    seed = 1,
    resources = cpu(cores = 1, memory_gb = 1, hosts = 2),
    tags = ["manual"],
)
"""


def _build_on_ray(ws: Path, store: str, address: str, pattern: str = f"{PKG}:all", *options: str) -> dict:
    rc, out, err = run_cli(
        ws,
        "build",
        "--json",
        "--executor",
        "ray",
        "--ray-address",
        address,
        *options,
        pattern,
        store=store,
        timeout=TRAIN_TIMEOUT_S,
    )
    assert rc == 0, f"exit {rc}\n{out}\n{err}"
    return json.loads(out)


def _entry(read, key: str) -> dict:
    return json.loads(read(f"ac/{key[:2]}/{key}.json"))


def test_the_tutorial_pipeline_on_ray_and_gcs_matches_a_local_build(
    tmp_path, fake_gcs_server, gcs_bucket, ray_cluster
) -> None:
    store = f"gs://{gcs_bucket}/mb"
    ray_ws = lm_workspace(tmp_path / "ray", lm_build_file() + TWO_HOSTS)
    on_ray = _build_on_ray(ray_ws, store, ray_cluster)
    # The local build runs in the sandbox: the pipeline writes nothing outside its steps'
    # own directories, and the sandbox changes no byte.
    local_ws = lm_workspace(tmp_path / "local", lm_build_file())
    local = lm_build(local_ws, f"{PKG}:all", "--sandbox")

    assert set(statuses(on_ray).values()) == {"built"}
    ray_keys = {item["label"]: item["key"] for item in on_ray["targets"]}
    local_keys = {item["label"]: item["key"] for item in local["targets"]}
    # Every key, the evaluation's too: it holds the model's output digest, so two
    # independent trainings must publish the same bytes (timing stays out of outputs).
    assert ray_keys == local_keys
    fs = fake_gcs_server.fs()
    for label, key in ray_keys.items():
        remote = _entry(lambda path: fs.cat(f"{gcs_bucket}/mb/{path}"), key)
        here = _entry(lambda path: (local_ws / "cache" / path).read_bytes(), key)
        assert remote["label"] == label
        assert remote["files"] == here["files"], f"{label}: the files differ from the local build"
        assert remote["tree_digest"] == here["tree_digest"]
    # The timing is in the attempt records, where it may differ.
    model = ray_keys[f"{PKG}:model"]
    [record] = [
        json.loads(fs.cat(path))
        for path in fs.find(f"{gcs_bucket}/mb/attempts/{model[:2]}/{model}")
        if path.endswith(".json")
    ]
    assert record["status"] == "succeeded" and record["measured"]["tokens_per_s"] > 0
    # Once published, no copy of its checkpoints is left: not on the host, not in the bucket.
    assert not open_store(store, LOCAL_DIR).local_path(layout.scratch(model)).exists()
    assert not fs.exists(f"{gcs_bucket}/mb/scratch/{model[:2]}/{model}")

    again = _build_on_ray(ray_ws, store, ray_cluster)
    assert set(statuses(again).values()) == {"cached"}

    # Its hosts share a scratch directory as nodes would mount one (here: one machine's).
    shared = tmp_path / "shared-scratch"
    two = _build_on_ray(ray_ws, store, ray_cluster, f"{PKG}:model_on_2_hosts", "--ray-shared-scratch", str(shared))
    assert statuses(two)[f"{PKG}:model_on_2_hosts"] == "built"
    key = two["targets"][-1]["key"]
    (record,) = [
        json.loads(fs.cat(path))
        for path in fs.find(f"{gcs_bucket}/mb/attempts/{key[:2]}/{key}")
        if path.endswith(".json")
    ]
    log = fs.cat(f"{gcs_bucket}/mb/attempts/{key[:2]}/{key}/{record['attempt']}.log").decode()
    assert "[host 0] " in log and "[host 1] " in log
    scratch = shared / open_store(store, LOCAL_DIR).local_path("").name / layout.scratch(key)
    assert f"checkpoints in {scratch}" in log
    assert not scratch.exists()  # published: the shared checkpoints are gone too
    entry = _entry(lambda path: fs.cat(f"{gcs_bucket}/mb/{path}"), key)
    metrics = fs.cat(f"{gcs_bucket}/mb/out/{key[:2]}/{key}/metrics.jsonl").decode().splitlines()
    steps = [json.loads(line)["step"] for line in metrics]
    assert steps == sorted(set(steps)) and steps[-1] == 3  # process 0's metrics, each step once
    assert any(item["path"] == "tokenizer/tokenizer.json" for item in entry["files"])
