"""The LM pipeline on a shared GCS store (fake-gcs-server): teammates share its results,
and the Levanter steps read their inputs from the bucket instead of downloading them."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli, statuses
from test_rules_lm import TRAIN_TIMEOUT_S, _build_file, _workspace


def _build(ws: Path, store: str, *patterns: str) -> dict:
    rc, out, err = run_cli(ws, "build", "--json", *patterns, store=store, timeout=TRAIN_TIMEOUT_S)
    assert rc == 0, f"exit {rc}\n{out}\n{err}"
    return json.loads(out)


def _downloaded_trees(ws: Path) -> list[Path]:
    return sorted((ws / ".marinbuild").glob("**/local-cache/trees/*"))


def test_a_teammate_reuses_the_pipeline_and_reads_inputs_from_the_bucket(tmp_path, gcs_bucket):
    store = f"gs://{gcs_bucket}/team"
    alice = _workspace(tmp_path / "alice", _build_file())
    built = _build(alice, store, "//exp:all")
    assert set(statuses(built).values()) == {"built"}

    extra_eval = (
        '\neval_lm(name = "eval_wide", model = ":model", data = [":tokens"], batch_size = 2, max_batches = 1)\n'
    )
    bob = _workspace(tmp_path / "bob", _build_file() + extra_eval)
    shared = _build(bob, store, "//exp:all")
    found = statuses(shared)
    assert found.pop("//exp:eval_wide") == "built"
    assert set(found.values()) == {"cached"}, "Bob's build of Alice's targets runs nothing"
    (only_tree,) = _downloaded_trees(bob)  # eval_wide's own output, kept at publish
    assert [path.name for path in only_tree.iterdir()] == ["metrics.json"], (
        "the model and token caches were read from the bucket, not downloaded"
    )
    evaluated = next(item for item in shared["targets"] if item["label"] == "//exp:eval_wide")
    rc, out, err = run_cli(bob, "where", "//exp:eval_wide", store=store)
    assert rc == 0, err
    metrics = json.loads((Path(out.strip()) / "metrics.json").read_text())
    assert metrics["loss"] > 0 and evaluated["output"].startswith(f"gs://{gcs_bucket}/team/out/")

    rc, out, err = run_cli(bob, "where", "//exp:model", store=store)
    assert rc == 0, err
    model = Path(out.strip())
    assert model.is_relative_to(bob / ".marinbuild")
    assert {"config.json", "model.safetensors"} <= {path.name for path in (model / "hf").iterdir()}
