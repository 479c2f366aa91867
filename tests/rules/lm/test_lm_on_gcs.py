"""The LM pipeline on a shared GCS store (fake-gcs-server): teammates share its results,
and the Levanter steps read their inputs from the bucket instead of downloading them."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli, statuses
from helpers_lm import TRAIN_TIMEOUT_S, lm_build_file, lm_workspace


def _build(ws: Path, store: str, *patterns: str) -> dict:
    rc, out, err = run_cli(ws, "build", "--json", *patterns, store=store, timeout=TRAIN_TIMEOUT_S)
    assert rc == 0, f"exit {rc}\n{out}\n{err}"
    return json.loads(out)


def _downloaded_trees(ws: Path) -> list[Path]:
    return sorted((ws / ".marinbuild").glob("**/local-cache/trees/*"))


def test_a_teammate_reuses_the_pipeline_and_reads_inputs_from_the_bucket(tmp_path, gcs_bucket):
    store = f"gs://{gcs_bucket}/team"
    alice = lm_workspace(tmp_path / "alice", lm_build_file())
    built = _build(alice, store, "//exp:all")
    assert set(statuses(built).values()) == {"built"}

    extra = (
        '\neval_lm(name = "eval_wide", model = ":model", data = [":tokens"], batch_size = 2, max_batches = 1)\n'
        'export_hf(name = "export", model = ":model")\n'
    )
    bob = lm_workspace(tmp_path / "bob", lm_build_file() + extra)
    shared = _build(bob, store, "//exp:all")
    found = statuses(shared)
    assert (found.pop("//exp:eval_wide"), found.pop("//exp:export")) == ("built", "built")
    assert set(found.values()) == {"cached"}, "Bob's build of Alice's targets runs nothing"
    # Only their own outputs, kept at publish: the model and token caches were read from the
    # bucket, not downloaded (export_hf copied only the tokenizer, into its scratch space).
    trees = sorted(sorted(path.name for path in tree.iterdir()) for tree in _downloaded_trees(bob))
    assert trees == [
        ["config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"],
        ["metrics.json"],
    ]
    evaluated = next(item for item in shared["targets"] if item["label"] == "//exp:eval_wide")
    rc, out, err = run_cli(bob, "where", "//exp:eval_wide", store=store)
    assert rc == 0, err
    metrics = json.loads((Path(out.strip()) / "metrics.json").read_text())
    assert metrics["loss"] > 0 and evaluated["output"].startswith(f"gs://{gcs_bucket}/team/out/")

    rc, out, err = run_cli(bob, "where", "//exp:model", store=store)
    assert rc == 0, err
    model = Path(out.strip())
    assert model.is_relative_to(bob / ".marinbuild")
    assert {"checkpoint", "tokenizer", "model.json"} <= {path.name for path in model.iterdir()}
