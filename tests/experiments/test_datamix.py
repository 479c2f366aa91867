"""experiments/datamix (issue #29): raw web pages to a trained model, offline — two crawls,
each extracted, filtered (with a language-ID model trained by a step), scored by a quality
classifier trained on two corpora, deduplicated and tokenized, then mixed into a nano
Llama's training data and evaluated.

The example's BUILD file is loaded where it is, with the repository's own settings; the
builds run on a copy of it in a workspace of their own (the same file, the same rules), so
that a test can grow a crawl or change a filter. What ran is read from the store's attempt
records, one a unit (`//pkg:step [unit]`, with the unit's function).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import tomllib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import keys, parse_json_output, run_cli, statuses
from helpers_workspace import loader_for

from marinbuild.actions.analysis.graph import build_graph, expand_patterns
from marinbuild.labels import parse_pattern

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "experiments/datamix/BUILD.marin"
PKG = "//experiments/datamix"
SOURCES = ("docs", "library")
CHAIN = ("pages", "text", "filtered", "scored", "deduped", "tokens")
DATA_HALF = [f"{PKG}:{source}_tokens" for source in SOURCES]
BUILD_TIMEOUT_S = 900  # the data half takes about a minute on two idle cores, training another

# Edits of the example, each a line of its text as it is and as a test makes it.
DOCS_CRAWL = ('"docs": {"crawl": {"seed": 1, "pages": 400,', '"docs": {"crawl": {"seed": 1, "pages": 500,')
MIN_WORDS = ('{"name": "gopher_quality", "min_words": 50}', '{"name": "gopher_quality", "min_words": 100}')
KEEPS_NONE = ("QUALITY_THRESHOLD = 0.7", "QUALITY_THRESHOLD = 0.99")
TUTORIAL = REPO / "docs" / "tutorial.md"


def _workspace(root: Path) -> Path:
    """A workspace holding a copy of the example, with the repository's rule modules."""
    rules = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["marinbuild"]["rules"]
    (root / "marinbuild.toml").write_text(f"rules = {json.dumps(rules)}\n")
    (root / "rules" / "lm").mkdir(parents=True)
    shutil.copy(REPO / "rules" / "lm" / "lm.star", root / "rules" / "lm" / "lm.star")
    (root / EXAMPLE).parent.mkdir(parents=True)
    shutil.copy(REPO / EXAMPLE, root / EXAMPLE)
    return root


def _build(ws: Path, *args: str, store: str | None = None) -> dict[str, Any]:
    rc, out, err = run_cli(ws, "build", "--json", *args, store=store, timeout=BUILD_TIMEOUT_S)
    assert rc == 0, f"exit {rc}\nstdout:\n{out}\nstderr:\n{err}"
    return parse_json_output(out) | {"stderr": err}


def _units(store: Path) -> Counter[tuple[str, str]]:
    """How many times each unit ran, by its label and its function's name."""
    records = [json.loads(path.read_text()) for path in (store / "attempts").rglob("*.json")]
    return Counter((record["label"], record["impl"].rpartition(":")[2]) for record in records if "shard_of" in record)


def _of(units: Counter[tuple[str, str]], step: str, function: str | None = None) -> list[str]:
    """The unit names of `step` among `units` (of its function `function`), each once a run, sorted."""
    names = []
    for (label, impl), count in units.items():
        of_step, _, name = label.partition(" [")
        if of_step == f"{PKG}:{step}" and function in (None, impl):
            names += [name.removesuffix("]")] * count
    return sorted(names)


def _output(built: dict[str, Any], name: str) -> Path:
    return Path(built["by_label"][f"{PKG}:{name}"]["output"])


def _summary(built: dict[str, Any], name: str) -> dict[str, Any]:
    return json.loads((_output(built, name) / "summary.json").read_text())


def _tree(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in root.rglob("*") if path.is_file()}


@contextlib.contextmanager
def _edited(ws: Path, edit: tuple[str, str]) -> Iterator[None]:
    """The example with one line edited, put back afterwards."""
    build_file = ws / EXAMPLE
    text = build_file.read_text()
    assert text.count(edit[0]) == 1, f"{EXAMPLE} no longer holds {edit[0]!r} once"
    build_file.write_text(text.replace(*edit))
    try:
        yield
    finally:
        build_file.write_text(text)


@pytest.fixture(scope="module")
def datamix(tmp_path_factory) -> tuple[Path, dict[str, Any], Counter[tuple[str, str]]]:
    """The copy of the example with its data half built, once per test process, and the
    units that build ran; a test that edits it puts it back."""
    ws = _workspace(tmp_path_factory.mktemp("datamix"))
    built = _build(ws, *DATA_HALF)
    return ws, built, _units(ws / "cache")


def test_the_example_is_the_pipeline_from_raw_pages_to_an_evaluated_mixture():
    """The real file, loaded with the repository's settings: each crawl's chain, the filters
    the issue asks for, models trained here, and the mixture; nothing reads the network."""
    loader = loader_for(REPO)  # no package cache: nothing written into the checkout
    graph = build_graph(loader, expand_patterns(loader, [parse_pattern(f"{PKG}:all", "")], ()))
    rules = {label.removeprefix(f"{PKG}:"): target.rule.name for label, target in graph.targets.items()}
    for source in SOURCES:
        chain = [f"{source}_{step}" for step in CHAIN]
        assert [rules[name] for name in chain] == [
            "synthetic_web_pages",
            "extract_text",
            "filter_text",
            "score_quality",
            "dedup",
            "tokenize",
        ]
        for upstream, downstream in zip(chain, chain[1:]):
            assert f"{PKG}:{upstream}" in graph.rule_deps(f"{PKG}:{downstream}"), (upstream, downstream)
        filtered = graph.targets[f"{PKG}:{source}_filtered"].attrs
        assert [spec["name"] for spec in filtered["filters"]] == [
            "language",
            "gopher_quality",
            "c4_quality",
            "gopher_repetition",
        ]
        assert rules[filtered["language_model"].removeprefix(f"{PKG}:")] == "train_fasttext"
        deduped = graph.targets[f"{PKG}:{source}_deduped"].attrs
        assert deduped["exact"] and deduped["fuzzy"]
    classifier = graph.targets[f"{PKG}:quality_classifier"].attrs
    assert {rules[classifier[side].removeprefix(f"{PKG}:")] for side in ("positive", "negative")} == {"extract_text"}
    model = graph.targets[f"{PKG}:model"]
    assert model.rule.name == "train_lm" and model.attrs["data"] == {f"{PKG}:{s}_tokens": 0.5 for s in SOURCES}
    assert graph.targets[f"{PKG}:eval"].attrs["data"] == DATA_HALF
    # Offline: every target's rule makes its data here, none fetches it.
    assert set(rules.values()) <= {
        "synthetic_web_pages",
        "translated_phrases",
        "extract_text",
        "train_fasttext",
        "train_quality_classifier",
        "filter_text",
        "score_quality",
        "dedup",
        "bpe_tokenizer",
        "tokenize",
        "train_lm",
        "eval_lm",
    }


def test_the_data_half_builds_and_a_second_run_reruns_nothing(datamix):
    ws, built, _ = datamix
    assert set(statuses(built).values()) == {"built"}, built["stderr"]
    assert len(built["targets"]) == 20
    for source in SOURCES:
        text = _summary(built, f"{source}_text")
        assert sum(skip["count"] for skip in text["skipped"].values()) > 0  # the malformed and empty pages
        # Every filter of the chain removed something, and said why.
        filters = _summary(built, f"{source}_filtered")["filters"]
        assert all(step["rejected"] > 0 and step["reasons"] for step in filters), filters
        assert filters[0]["seen"] == sum(text["documents"].values())
        scored = _summary(built, f"{source}_scored")
        assert scored["threshold"] == 0.7 and sum(scored["rejected"].values()) > 0
        removed = _summary(built, f"{source}_deduped")["removed"]
        assert removed["exact"] > 0 and removed["near"] > 0, removed
        tokens = _summary(built, f"{source}_tokens")
        assert tokens["documents"] == _summary(built, f"{source}_deduped")["documents"]
        assert all(count > 0 for count in tokens["documents"].values())

    units = _units(ws / "cache")
    again = _build(ws, *DATA_HALF)
    assert set(statuses(again).values()) == {"cached"} and keys(again) == keys(built)
    assert _units(ws / "cache") == units


def test_a_file_added_to_a_crawl_is_the_only_one_processed(datamix):
    """100 more pages: one more WARC file, which alone is extracted, filtered, scored and
    signed for dedup; the other crawl runs nothing."""
    ws, built, _ = datamix
    before = _units(ws / "cache")
    with _edited(ws, DOCS_CRAWL):
        grown = _build(ws, *DATA_HALF)
    changed = {label.removeprefix(f"{PKG}:") for label, status in statuses(grown).items() if status == "built"}
    assert changed == {f"docs_{step}" for step in CHAIN}, statuses(grown)
    ran = _units(ws / "cache") - before
    assert _of(ran, "docs_text") == ["docs_pages/warc/part-00004.warc.gz"]
    added = _summary(grown, "docs_text")["files"]["docs_pages/warc/part-00004.warc.gz"]
    new_shards = [f"{split}/{added['shard']}" for split, count in added["documents"].items() if count]
    assert len(new_shards) == 2
    assert _of(ran, "docs_filtered") == new_shards
    assert _of(ran, "docs_scored", "score_unit") == _of(ran, "docs_scored", "cut_unit") == new_shards
    # Dedup is global: its map signs the new shards alone; the apply phase runs again for the
    # new shards and where decisions may have changed. Its units are the shards in a stable
    # order (split, then name: a name is a key, so where a new shard falls is chance), numbered
    # in it, and a document is decided against those before it: no shard before the first
    # new one is applied again.
    assert len(_of(ran, "docs_deduped", "map_unit")) == len(new_shards)
    applied = _of(ran, "docs_deduped", "apply_unit")
    order = sorted(path.name for path in (_output(grown, "docs_scored") / "train").glob("shard-*.jsonl"))
    first_new = order.index(added["shard"])
    assert f"train/shard-{first_new:05d}.jsonl" in applied, applied
    assert not [name for name in applied if name.startswith("train/") and int(name[12:17]) < first_new], applied
    assert not any(label.startswith(f"{PKG}:library_") for label, _ in ran)


def test_a_filter_parameter_reruns_the_filters_and_what_follows_not_extraction(datamix):
    ws, built, _ = datamix
    before = _units(ws / "cache")
    with _edited(ws, MIN_WORDS):
        stricter = _build(ws, *DATA_HALF)
    rebuilt = {f"{source}_{step}" for source in SOURCES for step in ("filtered", "scored", "deduped", "tokens")}
    assert {label.removeprefix(f"{PKG}:") for label, status in statuses(stricter).items() if status == "built"} == (
        rebuilt
    )
    ran = _units(ws / "cache") - before
    assert not [label for label, _ in ran if " [" in label and label.split(" [")[0].endswith("_text")]
    for source in SOURCES:
        # Every shard filtered again (a parameter is in every unit's key), and fewer kept.
        shards = sum(_summary(built, f"{source}_text")["shards"].values())
        assert len(_of(ran, f"{source}_filtered")) == shards
        gopher = _summary(stricter, f"{source}_filtered")["filters"][1]
        assert gopher["min_words"] == 100
        assert gopher["rejected"] > _summary(built, f"{source}_filtered")["filters"][1]["rejected"]
        assert keys(stricter)[f"{PKG}:{source}_tokens"] != keys(built)[f"{PKG}:{source}_tokens"]


def test_a_threshold_that_keeps_no_document_stops_at_its_step_in_one_line(datamix):
    """The classifier's scores all lie below 0.99: the cut fails, saying so with the range of
    the scores, and nothing after it runs (dedup, tokenize, a training would fail in Levanter
    on an empty corpus); no shard is scored again."""
    ws, built, _ = datamix
    before = _units(ws / "cache")
    with _edited(ws, KEEPS_NONE):
        rc, out, err = run_cli(ws, "build", f"{PKG}:docs_tokens", timeout=BUILD_TIMEOUT_S)
    assert rc == 1, f"exit {rc}\n{out}\n{err}"
    [failed] = [line for line in err.splitlines() if "] failed " in line]
    documents = sum(_summary(built, "docs_filtered")["documents"].values())
    found = re.fullmatch(
        rf"\[\d+/\d+\] failed {PKG}:docs_scored: the threshold 0\.99 rejected all {documents:,} documents "
        r"\(scores (0\.\d+)–(0\.\d+)\)",
        failed,
    )
    assert found and float(found[1]) <= float(found[2]) < 0.99, failed
    assert f"skipped {PKG}:docs_deduped" in err and f"skipped {PKG}:docs_tokens" in err, err
    ran = _units(ws / "cache") - before
    assert not _of(ran, "docs_scored", "score_unit") and _of(ran, "docs_scored", "cut_unit"), ran


def _shown_in_tutorial(command: str) -> list[str]:
    """The lines docs/tutorial.md shows `command` printing: the fenced block after its own."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```$", TUTORIAL.read_text(), re.MULTILINE | re.DOTALL)
    index = next(index for index, block in enumerate(blocks) if command in block.splitlines())
    return blocks[index + 1].splitlines()


def test_the_tutorials_filter_counts_are_what_show_prints(datamix):
    """docs/tutorial.md §8's lines of `marinbuild show`: each printed, in that order (the
    tutorial leaves the other lines out)."""
    ws, _, _ = datamix
    command = f"marinbuild show {PKG}:docs_filtered"
    rc, out, err = run_cli(ws, *command.split()[1:])
    assert rc == 0, err
    printed = out.splitlines()
    position = 0
    for line in _shown_in_tutorial(command):
        assert line in printed[position:], f"docs/tutorial.md shows {line!r}; show prints:\n{out}"
        position = printed.index(line, position) + 1


def test_the_whole_example_trains_on_the_mixture_and_a_second_run_reruns_nothing(datamix):
    """`marinbuild //experiments/datamix:all`, as docs/tutorial.md shows it, on the copy."""
    ws, _, _ = datamix
    everything = _build(ws, f"{PKG}:all")
    assert {label for label, status in statuses(everything).items() if status == "built"} == {
        f"{PKG}:model",
        f"{PKG}:eval",
    }, everything["stderr"]
    assert len(everything["targets"]) == 22
    metrics = json.loads((Path(everything["by_label"][f"{PKG}:eval"]["output"]) / "metrics.json").read_text())
    # Evaluated on each crawl; trained well below a uniform guess over the vocabulary.
    assert set(metrics["sets"]) == {f"{source}_tokens" for source in SOURCES}
    assert all(math.isfinite(item["loss"]) and item["loss"] < math.log(1024) for item in metrics["sets"].values())
    units = _units(ws / "cache")
    again = _build(ws, f"{PKG}:all")
    assert set(statuses(again).values()) == {"cached"} and keys(again) == keys(everything)
    assert _units(ws / "cache") == units


def test_a_crawl_cleaned_on_a_ray_cluster_gives_the_local_bytes(datamix, ray_cluster, tmp_path):
    """Extraction, the filters with the language model, the quality cut and dedup, every unit
    a Ray task: the keys and outputs of the local build, byte for byte."""
    ws, built, first_units = datamix
    store = tmp_path / "ray-store"
    on_ray = _build(ws, "--executor", "ray", "--ray-address", ray_cluster, f"{PKG}:docs_deduped", store=str(store))
    assert set(statuses(on_ray).values()) == {"built"}, on_ray["stderr"]
    for label, key in keys(on_ray).items():
        assert key == keys(built)[label], label
        assert _tree(Path(on_ray["by_label"][label]["output"])) == _tree(Path(built["by_label"][label]["output"]))
    # The same units, each run once.
    steps = ("docs_text", "docs_filtered", "docs_scored", "docs_deduped")
    assert set(_units(store).values()) == {1}
    assert [_of(_units(store), step) for step in steps] == [_of(first_units, step) for step in steps]
