"""Data rules (text_files, hf_dataset, python_corpus): the corpus layout, sampling and pinning.

Every build goes through the CLI; Hub data comes from a Hub-layout cache on disk
(`helpers_hub`), never from the network.
"""

from __future__ import annotations

import gzip
import json
import platform
import sysconfig
from pathlib import Path

import blake3
import pyarrow as pa
import pyarrow.parquet as pq
from conftest import build_json, keys, statuses, store_files
from helpers_workspace import assert_bad_input, build

from rules.common.stdlib import stdlib_files
from rules.data.sources import chunk_lines

pytest_plugins = ["helpers_hub"]  # the offline_hub fixture

RULES = 'rules = ["rules.data.decls"]\n'
DOCS = [f"document number {i}" for i in range(8)]


def jsonl(texts: list[str], key: str = "text") -> str:
    return "".join(json.dumps({key: text}) + "\n" for text in texts)


def split_texts(output: str | Path, split: str) -> list[str]:
    shards = sorted((Path(output) / split).glob("*"))
    assert [shard.name for shard in shards] == [f"shard-{i:05d}.jsonl" for i in range(len(shards))]
    return [json.loads(line)["text"] for shard in shards for line in shard.read_text().splitlines()]


def summary(output: str | Path) -> dict:
    return json.loads((Path(output) / "summary.json").read_text())


# -- text_files -----------------------------------------------------------------------------


def test_text_files_holds_out_evenly_spaced_documents(make_workspace):
    ws = make_workspace(
        {
            "d/BUILD.marin": 'text_files(name = "c", srcs = ["docs.jsonl"], validation_fraction = 0.25)\n',
            "d/docs.jsonl": jsonl(DOCS) + "\n",  # a blank line is skipped
        },
        config=RULES,
    )
    output = build_json(ws, "//d:c")["by_label"]["//d:c"]["output"]
    assert split_texts(output, "validation") == [DOCS[0], DOCS[4]]
    assert split_texts(output, "train") == [DOCS[i] for i in (1, 2, 3, 5, 6, 7)]
    assert summary(output) == {
        "documents": {"train": 6, "validation": 2},
        "shards": {"train": 1, "validation": 1},
        "source": {"files": ["docs.jsonl"], "format": "jsonl", "text_key": "text"},
    }


def test_text_files_reads_text_parquet_and_compressed_urls(make_workspace, tmp_path):
    remote = tmp_path / "bucket"
    remote.mkdir()
    table = pa.table({"body": ["parquet one", "parquet two", None, "parquet three"]})
    pq.write_table(table, remote / "part-0.parquet")
    (remote / "a.jsonl.gz").write_bytes(gzip.compress(jsonl(["zipped a", "zipped b"], key="content").encode()))
    ws = make_workspace(
        {
            "d/BUILD.marin": f"""\
                text_files(name = "txt", srcs = glob(["texts/*.txt"]), format = "text", validation_fraction = 0.5)
                text_files(name = "pq", urls = ["file://{remote}/*.parquet"], format = "parquet", \
text_key = "body", validation_fraction = 0.5)
                text_files(name = "gz", urls = ["{remote}/*.jsonl.gz"], text_key = "content", validation_fraction = 0.5)
                """,
            "d/texts/1.txt": "first file\nwhole",
            "d/texts/2.txt": "second file",
            "d/texts/3.txt": "",  # empty documents are dropped
        },
        config=RULES,
    )
    data = build_json(ws, "//d:all")["by_label"]
    assert split_texts(data["//d:txt"]["output"], "validation") == ["first file\nwhole"]
    assert split_texts(data["//d:txt"]["output"], "train") == ["second file"]
    assert summary(data["//d:txt"]["output"])["source"]["files"] == ["texts/1.txt", "texts/2.txt", "texts/3.txt"]
    assert split_texts(data["//d:pq"]["output"], "validation") == ["parquet one", "parquet three"]
    assert split_texts(data["//d:pq"]["output"], "train") == ["parquet two"]
    assert split_texts(data["//d:gz"]["output"], "validation") == ["zipped a"]
    assert split_texts(data["//d:gz"]["output"], "train") == ["zipped b"]
    assert summary(data["//d:gz"]["output"])["source"]["files"] == [f"file://{remote}/a.jsonl.gz"]


def test_text_files_names_the_bad_line(make_workspace):
    ws = make_workspace(
        {
            "d/BUILD.marin": 'text_files(name = "c", srcs = ["docs.jsonl"])\n',
            "d/docs.jsonl": jsonl(["a", "b"]) + '{"txt": "c"}\n',
        },
        config=RULES,
    )
    data = build_json(ws, "//d:c", expect_rc=1)
    assert data["by_label"]["//d:c"]["status"] == "failed"
    assert "docs.jsonl:3: expected an object with a string field 'text'" in data["by_label"]["//d:c"]["reason"]


def test_text_files_attribute_mistakes_fail_at_load(make_workspace):
    cases = [
        (
            'text_files(name = "c", srcs = ["a.jsonl"], format = "csv")\n',
            "text_files 'c': format must be one of ['jsonl', 'text', 'parquet'], got 'csv'",
        ),
        (
            'text_files(name = "c", srcs = ["a.jsonl"], urls = ["gs://b/x"])\n',
            "text_files 'c': give exactly one of srcs",
        ),
        (
            'text_files(name = "c", srcs = ["a.jsonl"], validation_fraction = 1.0)\n',
            "text_files 'c': validation_fraction must be between 0 and 1",
        ),
        (
            'text_files(name = "c", srcs = ["a.jsonl"], sample_count = 1)\n',
            "text_files 'c': sample_count must be at least 2",
        ),
    ]
    for text, message in cases:
        ws = make_workspace({"d/BUILD.marin": "\n" + text, "d/a.jsonl": jsonl(["x"])}, config=RULES)
        assert_bad_input(build(ws, "//d:c"), ws, "d/BUILD.marin", 2, message)


# -- sample_count: reruns downstream, and early cutoff when the documents are the same ------

SAMPLED = """\
    text_files(name = "c", srcs = ["docs.jsonl"], sample_count = {count}, validation_fraction = 0.25)
    genrule(name = "count", srcs = [":c"], outs = ["n.txt"], cmd = "cat $(locations :c) | wc -l > $@")
    py_step(name = "first", fn = "steps.py:first", deps = [":c"])
    """

STEPS = """\
    import json


    def first(ctx):
        train = ctx.inputs["//d:c"].root / "train" / "shard-00000.jsonl"
        (ctx.out / "first.txt").write_text(json.loads(train.read_text().splitlines()[0])["text"])
    """


def test_sample_count_reruns_everything_downstream(make_workspace):
    files = {"d/docs.jsonl": jsonl(DOCS), "d/steps.py": STEPS}
    ws = make_workspace({**files, "d/BUILD.marin": SAMPLED.format(count=4)}, config=RULES)
    first = build_json(ws, "//d:all")
    assert split_texts(first["by_label"]["//d:c"]["output"], "train") == DOCS[1:4]
    (ws / "d/BUILD.marin").write_text(SAMPLED.format(count=6).replace("    ", ""))
    second = build_json(ws, "//d:all")
    assert statuses(second) == {"//d:c": "built", "//d:count": "built", "//d:first": "built"}
    assert all(keys(first)[label] != keys(second)[label] for label in keys(first))
    assert split_texts(second["by_label"]["//d:c"]["output"], "train") == [DOCS[i] for i in (1, 2, 3, 5)]
    # Past the end of the file, another sample_count gives the same bytes: only the data reruns.
    (ws / "d/BUILD.marin").write_text(SAMPLED.format(count=100).replace("    ", ""))
    assert statuses(build_json(ws, "//d:all")) == {"//d:c": "built", "//d:count": "built", "//d:first": "built"}
    (ws / "d/BUILD.marin").write_text(SAMPLED.format(count=200).replace("    ", ""))
    assert statuses(build_json(ws, "//d:all")) == {"//d:c": "built", "//d:count": "cached", "//d:first": "cached"}


# -- hf_dataset -----------------------------------------------------------------------------

README_WITH_SUBSETS = """\
    ---
    configs:
    - config_name: small
      data_files:
      - split: train
        path: small/train.jsonl
    - config_name: big
      data_files:
      - split: train
        path: big/train.jsonl
    ---
    """


def test_hf_dataset_reads_a_pinned_snapshot(make_workspace, offline_hub):
    offline_hub.add("dataset", "acme/tiny", {"data/train-00000-of-00001.jsonl": jsonl(DOCS)})
    offline_hub.add(
        "dataset",
        "acme/subsets",
        {
            "README.md": README_WITH_SUBSETS,
            "small/train.jsonl": jsonl(["s1", "s2"], key="content"),
            "big/train.jsonl": jsonl(DOCS),
        },
    )
    ws = make_workspace(
        {
            "d/BUILD.marin": f"""\
                hf_dataset(name = "tiny", repo = "acme/tiny", revision = "{offline_hub.commit}", \
sample_count = 5, validation_fraction = 0.25)
                hf_dataset(name = "small", repo = "acme/subsets", revision = "{offline_hub.commit}", \
subset = "small", text_key = "content", validation_fraction = 0.5)
                hf_dataset(name = "branch", repo = "acme/tiny", revision = "main", allow_unpinned = True, \
validation_fraction = 0.25)
                """
        },
        config=RULES,
    )
    data = build_json(ws, "//d:all")["by_label"]
    tiny = data["//d:tiny"]["output"]
    assert split_texts(tiny, "validation") == [DOCS[0], DOCS[4]]
    assert split_texts(tiny, "train") == DOCS[1:4]
    assert summary(tiny)["source"] == {
        "repo": "acme/tiny",
        "commit": offline_hub.commit,
        "subset": None,
        "split": "train",
        "text_key": "text",
    }
    assert split_texts(data["//d:small"]["output"], "train") == ["s2"]
    assert summary(data["//d:branch"]["output"])["source"]["commit"] == offline_hub.commit
    assert summary(data["//d:branch"]["output"])["documents"] == {"train": 6, "validation": 2}


def test_hf_dataset_refuses_a_branch(make_workspace, offline_hub):
    ws = make_workspace(
        {"d/BUILD.marin": '# a moving branch\nhf_dataset(name = "c", repo = "acme/tiny", revision = "main")\n'},
        config=RULES,
    )
    assert_bad_input(
        build(ws, "//d:c"),
        ws,
        "d/BUILD.marin",
        2,
        "hf_dataset 'c': revision 'main' is not a commit hash: "
        "a branch or tag can move while the cache keeps serving the old snapshot",
    )


def test_hf_dataset_without_the_snapshot_fails_offline(make_workspace, offline_hub):
    ws = make_workspace(
        {"d/BUILD.marin": f'hf_dataset(name = "c", repo = "acme/absent", revision = "{offline_hub.commit}")\n'},
        config=RULES,
    )
    data = build_json(ws, "//d:c", expect_rc=1)
    error = data["by_label"]["//d:c"]["reason"]
    assert error.startswith(f"cannot get dataset 'acme/absent' at revision '{offline_hub.commit}'")
    assert "HF_HUB_OFFLINE=1" in error


# -- python_corpus --------------------------------------------------------------------------


def test_python_corpus_reads_the_running_standard_library(make_workspace):
    ws = make_workspace(
        {"d/BUILD.marin": 'python_corpus(name = "py", sample_count = 30, chunk_characters = 1000)\n'}, config=RULES
    )
    output = build_json(ws, "//d:py")["by_label"]["//d:py"]["output"]
    root = Path(sysconfig.get_paths()["stdlib"])
    expected: list[str] = []
    digests: dict[str, str] = {}
    for path in stdlib_files(root):
        text = path.read_bytes()
        digests[path.relative_to(root).as_posix()] = blake3.blake3(text).hexdigest()
        expected += list(chunk_lines(text.decode("utf-8", errors="replace"), 1000))
        if len(expected) >= 30:
            break
    validation, train = split_texts(output, "validation"), split_texts(output, "train")
    assert validation == expected[:1]
    assert train == expected[1:30]
    assert all(len(text) <= 1000 for text in train)
    assert summary(output)["documents"] == {"train": 29, "validation": 1}
    assert summary(output)["source"] == {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "files": digests,
    }
    names = [path.relative_to(root).parts for path in stdlib_files(root)]
    assert ("json", "decoder.py") in names
    assert not [
        parts for parts in names if {"test", "tests", "site-packages"} & set(parts) or parts[-1].startswith("test_")
    ]


def test_chunk_lines_cuts_at_line_ends():
    assert list(chunk_lines("ab\ncd\nef\n", 6)) == ["ab\ncd\n", "ef\n"]
    assert list(chunk_lines("abcdefgh\nx\n", 4)) == ["abcd", "efgh", "\nx\n"]


def test_python_corpus_version_is_not_an_input(make_workspace):
    ws = make_workspace(
        {"d/BUILD.marin": '\npython_corpus(name = "py", python_version = "CPython 2.7.18")\n'}, config=RULES
    )
    assert_bad_input(
        build(ws, "//d:py"), ws, "d/BUILD.marin", 2, "python_corpus 'py': python_version is set by marinbuild"
    )


# -- determinism ----------------------------------------------------------------------------


def test_data_rules_are_byte_identical_across_stores(make_workspace, tmp_path):
    ws = make_workspace(
        {
            "d/BUILD.marin": (
                'text_files(name = "c", srcs = ["docs.jsonl"])\npython_corpus(name = "py", sample_count = 20)\n'
            ),
            "d/docs.jsonl": jsonl(DOCS),
        },
        config=RULES,
    )
    first = build_json(ws, "//d:all", store=str(tmp_path / "one"))
    second = build_json(ws, "//d:all", store=str(tmp_path / "two"))
    assert keys(first) == keys(second)
    outputs = {name: data for name, data in store_files(tmp_path / "one").items() if name.startswith("out/")}
    assert outputs and outputs == {
        name: data for name, data in store_files(tmp_path / "two").items() if name.startswith("out/")
    }
