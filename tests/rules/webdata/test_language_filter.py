"""The language filter's model as an input (issue #29): `train_fasttext` trains a language-ID
model offline (English extracted from generated pages against humanize's phrases), and
`filter_text` takes it as `language_model`, a label whose content digest is in every
unit's key."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import build_json, run_cli, statuses
from helpers_workspace import assert_bad_input, build

from rules.webdata.blocks.raw_corpus.warc import GROUND_TRUTH

RULES = 'rules = ["rules.webdata.decls"]\n'
BUILD = """
synthetic_web_pages(name = "english_pages", pages = 80, seed = 1, stdlib_modules = 2, non_english_rate = 0.0)
extract_text(name = "english", srcs = [":english_pages"], validation_fraction = 0.2)
translated_phrases(name = "other", validation_fraction = 0.2)
train_fasttext(
    name = "lid",
    data = {{":english": "en", ":other": "other"}},
    hyperparameters = {{"seed": {seed}, "epoch": 25}},
)

synthetic_web_pages(name = "pages", pages = 120, seed = 2, stdlib_modules = 2, non_english_rate = 0.2)
extract_text(name = "text", srcs = [":pages"])
filter_text(
    name = "filtered",
    data = ":text",
    filters = [{{"name": "language", "languages": ["en"], "threshold": 0.5}}],
    language_model = "{model}",
)
"""


def _units(store: Path) -> Counter[str]:
    records = [json.loads(path.read_text()) for path in (store / "attempts").rglob("*.json")]
    return Counter(record["label"] for record in records if "shard_of" in record)


def _documents(out: Path) -> list[dict]:
    return [json.loads(line) for shard in sorted(out.glob("*/shard-*.jsonl")) for line in shard.open()]


def _rejected(out: Path) -> list[dict]:
    return [json.loads(line) for shard in sorted(out.glob("rejected/*/shard-*.jsonl")) for line in shard.open()]


@pytest.fixture(scope="module")
def language_workspace(tmp_path_factory) -> tuple[Path, dict]:
    """A workspace built once per test process; a test that changes its BUILD file puts it back."""
    ws = tmp_path_factory.mktemp("language")
    (ws / "marinbuild.toml").write_text(RULES)
    (ws / "p").mkdir()
    (ws / "p" / "BUILD.marin").write_text(BUILD.format(seed=1, model=":lid"))
    return ws, build_json(ws, "//p:filtered", "//p:lid")


@contextlib.contextmanager
def _declared(ws: Path, seed: int, model: str, extra: str = "") -> Iterator[None]:
    (ws / "p" / "BUILD.marin").write_text(BUILD.format(seed=seed, model=model) + extra)
    try:
        yield
    finally:
        (ws / "p" / "BUILD.marin").write_text(BUILD.format(seed=1, model=":lid"))


def test_train_fasttext_tells_english_from_other_languages_and_says_how_well(language_workspace):
    ws, built = language_workspace
    lid = Path(built["by_label"]["//p:lid"]["output"])
    assert sorted(path.name for path in lid.iterdir()) == ["model.bin", "summary.json"]
    labels = json.loads((lid / "summary.json").read_text())["labels"]
    assert set(labels) == {"en", "other"} and labels["en"]["train"] > 40 and labels["other"]["train"] > 100
    assert labels["en"]["f1score"] > 0.9 and labels["other"]["f1score"] > 0.9, labels


def test_the_language_filter_keeps_english_and_rejects_the_rest_by_the_model(language_workspace):
    ws, built = language_workspace
    pages = Path(built["by_label"]["//p:pages"]["output"])
    truth = {page["url"]: page["kind"] for page in map(json.loads, (pages / GROUND_TRUTH).read_text().splitlines())}
    out = Path(built["by_label"]["//p:filtered"]["output"])
    kept, rejected = _documents(out), _rejected(out)
    non_english = {url for url, kind in truth.items() if kind == "non_english"}
    assert non_english and non_english <= {document["url"] for document in rejected}
    # Besides, only low-quality pages: lorem ipsum is no English, nor is "Untitled. Coming soon." much.
    assert {truth[document["url"]] for document in rejected} <= {"non_english", "low_quality"}
    assert all(document["reason"] == "other language" for document in rejected)
    assert all(document["metadata"]["language"] == "en" for document in kept)
    assert all(document["metadata"]["language_score"] >= 0.5 for document in kept)
    summary = json.loads((out / "summary.json").read_text())
    [language] = summary["filters"]
    assert language["model"] == "language_model" and language["rejected"] == len(rejected)


def test_the_model_s_digest_is_in_each_unit_s_key(language_workspace, tmp_path):
    ws, built = language_workspace
    store = ws / "cache"
    before = _units(store)
    # The same model bytes under another name (a source file): every unit is found.
    model = Path(built["by_label"]["//p:lid"]["output"]) / "model.bin"
    shutil.copy(model, ws / "p" / "lid.bin")
    with _declared(ws, seed=1, model="lid.bin"):
        same = build_json(ws, "//p:filtered")
    assert statuses(same)["//p:filtered"] == "built" and _units(store) == before
    # ... and in a directory of this machine, an external artifact pinned by its digest.
    (tmp_path / "models").mkdir()
    shutil.copy(model, tmp_path / "models" / "lid.176.bin")
    with _declared(
        ws, seed=1, model=":lid_external", extra=f'external(name = "lid_external", url = "{tmp_path}/models")\n'
    ):
        rc, _, err = run_cli(ws, "pin", "//p:lid_external")
        assert rc == 0, err
        pinned = build_json(ws, "//p:filtered")
    assert statuses(pinned)["//p:lid_external"] == "pinned" and _units(store) == before
    # Another model (another seed, other bytes): every shard is filtered again, nothing upstream.
    with _declared(ws, seed=2, model=":lid"):
        other = build_json(ws, "//p:filtered")
    assert statuses(other)["//p:lid"] == "built" and statuses(other)["//p:text"] == "cached"
    ran = _units(store) - before
    shards = json.loads((Path(other["by_label"]["//p:text"]["output"]) / "summary.json").read_text())["shards"]
    assert sum(ran.values()) == sum(shards.values()) and all(unit.startswith("//p:filtered [") for unit in ran)


def test_train_fasttext_gives_the_same_model_bytes_in_another_store(language_workspace, tmp_path):
    """fastText on one thread over a matrix of fresh pages: the same bytes in another process."""
    ws, built = language_workspace
    again = build_json(ws, "//p:lid", store=str(tmp_path / "other-store"))
    assert again["by_label"]["//p:lid"]["status"] == "built"
    first = Path(built["by_label"]["//p:lid"]["output"])
    second = Path(again["by_label"]["//p:lid"]["output"])
    assert (first / "model.bin").read_bytes() == (second / "model.bin").read_bytes()
    assert (first / "summary.json").read_bytes() == (second / "summary.json").read_bytes()


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        (
            'filter_text(name = "f", data = ":x", filters = [{"name": "language"}])',
            "filter_text 'f': the language filter needs language_model",
        ),
        (
            'filter_text(name = "f", data = ":x", language_model = ":m", filters = [{"name": "c4_quality"}])',
            "filter_text 'f': language_model is given, but no filter of the chain is 'language'",
        ),
        (
            'filter_text(name = "f", data = ":x", language_model = ":m", '
            'filters = [{"name": "language", "model": "/models/lid.176.bin"}])',
            "filter_text 'f': the language filter takes its model from the step's language_model attribute",
        ),
        (
            'filter_text(name = "f", data = ":x", language_model = ":m", '
            'filters = [{"name": "language", "treshold": 0.5}])',
            "filter_text 'f': filter 'language' has no parameter 'treshold'",
        ),
        (
            'train_fasttext(name = "f", data = {":a": "en", ":b": "en"})',
            "train_fasttext 'f': data needs at least two labels",
        ),
        (
            'train_fasttext(name = "f", data = {":a": "en", ":b": "de fr"})',
            "train_fasttext 'f': data maps each corpus to a label of letters",
        ),
        (
            'train_fasttext(name = "f", data = {":a": "en", ":b": "de"}, hyperparameters = {"bucket": 1000})',
            "train_fasttext 'f': hyperparameters: need character n-grams",
        ),
        (
            'train_fasttext(name = "f", data = {":a": "en", ":b": "de"}, hyperparameters = {"epochs": 3})',
            "train_fasttext 'f': attribute 'hyperparameters': unknown field 'epochs'",
        ),
    ],
)
def test_bad_language_attributes_are_errors_at_the_build_line(make_workspace, declared, message):
    ws = make_workspace({"p/BUILD.marin": f"\n{declared}\n"}, RULES)
    assert_bad_input(build(ws, "//p:f"), ws, "p/BUILD.marin", 2, message)


def test_a_language_model_input_without_a_model_file_fails_cleanly(make_workspace):
    ws = make_workspace(
        {
            "p/BUILD.marin": """
filegroup(name = "corpus", srcs = glob(["corpus/**"]))
filegroup(name = "no_model", srcs = ["notes.txt"])
filter_text(name = "f", data = ":corpus", language_model = ":no_model", filters = [{"name": "language"}])
""",
            "p/notes.txt": "not a model\n",
            "p/corpus/summary.json": "{}\n",
            "p/corpus/train/shard-00000.jsonl": json.dumps({"text": "The cat sat on the mat."}) + "\n",
        },
        RULES,
    )
    rc, _, err = run_cli(ws, "build", "//p:f")
    assert rc == 1 and "//p:no_model must hold exactly one fastText model file" in err and "Traceback" not in err


def _tree(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in root.rglob("*") if path.is_file()}


def test_the_pipeline_on_a_ray_cluster_gives_the_local_bytes(language_workspace, ray_cluster, tmp_path):
    """Pages, extraction, the model's training and the filter with it, every unit a Ray task:
    the outputs of a local build, byte for byte."""
    ws, built = language_workspace
    store = tmp_path / "ray-store"
    on_ray = build_json(ws, "--executor", "ray", "--ray-address", ray_cluster, "//p:filtered", store=str(store))
    assert set(statuses(on_ray).values()) == {"built"}
    for label in ("//p:text", "//p:lid", "//p:filtered"):
        assert _tree(Path(on_ray["by_label"][label]["output"])) == _tree(Path(built["by_label"][label]["output"]))
    units = _units(store)
    shards = json.loads((Path(on_ray["by_label"]["//p:text"]["output"]) / "summary.json").read_text())["shards"]
    assert set(units.values()) == {1}
    assert sum(unit.startswith("//p:filtered [") for unit in units) == sum(shards.values())
