"""`marinbuild show` and `marinbuild rerun [--check]`: an output traced to its recipe, and
the recipe rebuilt from the store alone."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from conftest import build_json, run_cli, statuses

import marinbuild
from marinbuild.errors import GraphError
from marinbuild.hashing import digest_file

BUILD = """\
    genrule(name = "words", srcs = ["data.txt"], outs = ["words.txt"], cmd = "tr -s ' ' '\\\\n' < $< | sort > $@")
    py_step(name = "report", fn = "report.py:write", config = {"title": {"text": "hello"}}, deps = [":words"])
    genrule(name = "clock", outs = ["now.txt"], cmd = "date +%s%N > $@")
    """
REPORT = """\
    def write(ctx):
        [words] = ctx.files("//p:words")
        (ctx.out / "report.txt").write_text(ctx.attrs["config"]["title"]["text"] + ": " + words.read_text())
    """


def workspace(make_workspace, name=None):
    return make_workspace({"p/BUILD.marin": BUILD, "p/report.py": REPORT, "p/data.txt": "b a c\n"}, name=name)


def show(ws, target: str, *options: str, store: str | None = None) -> dict:
    rc, out, err = run_cli(ws, "show", "--json", *options, target, store=store)
    assert rc == 0, err
    return json.loads(out)


def test_show_by_label_and_by_key(make_workspace):
    ws = workspace(make_workspace)
    built = build_json(ws, "//p:report", "//p:words")
    key = built["by_label"]["//p:report"]["key"]
    by_label = show(ws, "//p:report", "--recursive")
    assert by_label == show(ws, key[:12], "--recursive")
    assert by_label["key"] == key and by_label["label"] == "//p:report"
    recipe = by_label["recipe"]
    assert recipe["rule"] == "py_step" and recipe["version"] == 1
    assert recipe["attrs"]["config"] == {"title": {"text": "hello"}}
    words = recipe["inputs"]["//p:words"]
    assert words["key"] == built["by_label"]["//p:words"]["key"]
    assert words["made_by"]["recipe"]["rule"] == "genrule"
    assert set(words["made_by"]["recipe"]["inputs"]) == {"//p:data.txt"}
    assert "source" in recipe["inputs"]["//p:report.py"]
    provenance = by_label["provenance"]
    assert {
        "user",
        "host",
        "started",
        "finished",
        "duration_s",
        "marinbuild",
        "python",
        "git_commit",
        "rule_code",
    } <= set(provenance)
    assert [item["path"] for item in by_label["outputs"]] == ["report.txt"]

    rc, out, err = run_cli(ws, "show", "//p:report")
    assert rc == 0 and "py_step version 1" in out and "//p:words  output" in out and "report.txt" in out

    # A label whose current recipe is not built shows its newest output, and says so.
    (ws / "p/data.txt").write_text("z y\n")
    rc, out, err = run_cli(ws, "show", "--json", "//p:words")
    assert rc == 0 and json.loads(out)["key"] == built["by_label"]["//p:words"]["key"]
    assert "not built for its current recipe" in err
    assert run_cli(ws, "show", "//p:clock")[0] == 2  # never built


def test_show_by_key_prints_a_unit_of_a_sharded_step(make_workspace):
    """A sharded step's entry names its units' keys (docs/rules.md#sharded-steps), and
    `marinbuild show KEY` prints one: its shard, by content, as an input."""
    text = "The cat sat on the mat and looked at the birds that flew over the garden wall, on day {}."
    shard, held_out = ("".join(json.dumps({"text": text.format(day)}) + "\n" for day in days) for days in ([1, 2], [3]))
    files = {
        "p/BUILD.marin": """\
            filegroup(name = "raw", srcs = glob(["corpus/**"]))
            filter_text(name = "filtered", data = ":raw", filters = [{"name": "gopher_quality", "min_words": 3}])
            """,
        "p/corpus/summary.json": "{}\n",
        "p/corpus/train/shard-00000.jsonl": shard,
        "p/corpus/validation/shard-00000.jsonl": held_out,
    }
    ws = make_workspace(files, 'rules = ["rules.webdata.decls"]\n')
    build_json(ws, "//p:filtered")
    units = show(ws, "//p:filtered")["shards"]
    assert len(units) == 2
    rc, out, err = run_cli(ws, "show", units[0][:12])
    assert rc == 0, err
    lines = out.splitlines()
    split = {
        "//p:filtered [train/shard-00000.jsonl]": "train",
        "//p:filtered [validation/shard-00000.jsonl]": "validation",
    }[lines[0]]
    assert f"  key          {units[0]}" in lines and "  rule         shard version 1" in lines
    read = ws / "p" / "corpus" / split / "shard-00000.jsonl"
    assert f"    shard  file {digest_file(read)[:12]}, {read.stat().st_size:,} bytes" in lines, out
    assert any(line.startswith("    kept.jsonl  ") for line in lines), out


def test_rerun_from_the_store_alone_is_byte_identical(make_workspace, tmp_path):
    ws = workspace(make_workspace)
    store = tmp_path / "shared-store"
    built = build_json(ws, "//p:report", store=str(store))
    key = built["by_label"]["//p:report"]["key"]
    original = (store / "out" / key[:2] / key / "report.txt").read_bytes()

    # A fresh clone: no BUILD files, no sources, nothing in its local state; and the store
    # has lost every output (only entries, attempt records and source blobs remain).
    fresh = make_workspace({}, name="fresh")
    shutil.rmtree(store / "out")
    rc, out, err = run_cli(fresh, "rerun", key[:16], store=str(store))
    assert rc == 0, err
    assert "byte-identical to the recorded output" in out
    assert (store / "out" / key[:2] / key / "report.txt").read_bytes() == original
    words_key = built["by_label"]["//p:words"]["key"]
    assert (store / "out" / words_key[:2] / words_key / "words.txt").read_text() == "a\nb\nc\n"

    # Once there, a rerun finds it cached; --check runs it again aside and compares bytes.
    rc, out, err = run_cli(fresh, "rerun", key, store=str(store))
    assert rc == 0 and "cached" in out
    rc, out, err = run_cli(fresh, "rerun", "--check", key, store=str(store))
    assert rc == 0 and "matches the stored output (bytes)" in out, out + err

    # `history` of the fresh clone shows the reruns like any build (--all: also the ones
    # that ran nothing, like the check, whose side run is not published).
    rc, out, err = run_cli(fresh, "history", store=str(store))
    assert f"rerun {key}" in out and "rerun --check" not in out
    rc, out, err = run_cli(fresh, "history", "--all", store=str(store))
    assert f"rerun --check {key}" in out
    # The check's side run is an attempt like any other, with its log, never published.
    rc, out, err = run_cli(fresh, "log", "--list", "//p:report", store=str(store))
    lines = [line for line in out.splitlines() if "//p:report" in line]
    assert rc == 0 and len(lines) == 3, out  # the build, the rerun, the check
    assert "succeeded" in lines[-1] and "(aside: rerun --check, not published)" in lines[-1]
    assert "aside" not in lines[0] + lines[1]
    rc, out, err = run_cli(fresh, "log", "//p:report", store=str(store))
    assert rc == 0 and "aside: rerun --check" in err


def test_rerun_check_reports_a_nondeterministic_step(make_workspace):
    ws = workspace(make_workspace)
    key = build_json(ws, "//p:clock")["by_label"]["//p:clock"]["key"]
    rc, out, err = run_cli(ws, "rerun", "--check", key)
    assert rc == 1, err
    assert "differs from the stored output (bytes)" in out and "now.txt:" in out
    side = out.strip().splitlines()[-1].split(": ", 1)[1]
    assert side.startswith(str(ws / "cache" / "checks" / key)) and (ws / side / "now.txt").is_file()
    records = [json.loads(path.read_text()) for path in (ws / "cache" / "attempts" / key[:2] / key).glob("*.json")]
    assert sorted(record.get("aside", "") for record in records) == ["", "rerun --check"]


def test_rerun_refuses_what_is_not_a_stored_key(make_workspace):
    ws = workspace(make_workspace)
    assert statuses(build_json(ws, "//p:words")) == {"//p:words": "built"}
    rc, out, err = run_cli(ws, "rerun", "0123456789abcdef")
    assert rc == 2 and "0 keys in" in err
    rc, out, err = run_cli(ws, "rerun", "not-a-key")
    assert rc == 2 and "is not a key" in err


def test_python_api_output_and_metrics(make_workspace):
    ws = workspace(make_workspace)
    with pytest.raises(GraphError, match="is not built"):
        marinbuild.output("//p:words", workspace=ws)  # reading never builds unless asked
    assert not (ws / "cache").exists()
    path = marinbuild.output("//p:words", workspace=ws, build=True)
    assert (path / "words.txt").read_text() == "a\nb\nc\n"
    assert marinbuild.output("//p:words", workspace=ws) == path
    assert marinbuild.metrics("//p:words", workspace=ws) == {}  # a genrule has no metrics
    (path / "words.txt").write_text("tampered\n")
    with pytest.raises(GraphError, match="does not match its manifest"):
        marinbuild.output("//p:words", workspace=ws)  # verified, never served corrupt


def test_git_dirty_counts_files_git_does_not_track(make_workspace):
    """An experiment's BUILD file not yet added to git is not in the commit either: the
    build is dirty. marinbuild's own state and a store inside the workspace do not count."""
    ws = make_workspace({"p/BUILD.marin": 'genrule(name = "x", outs = ["x.txt"], cmd = "echo x > $@")\n'})
    (ws / ".gitignore").write_text("")  # the store and .marinbuild/ are not ignored
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=ws, check=True)
    subprocess.run([*git, "add", "marinbuild.toml", ".gitignore"], cwd=ws, check=True)
    subprocess.run([*git, "commit", "-qm", "settings"], cwd=ws, check=True)
    build_json(ws, "//p:x")
    assert show(ws, "//p:x")["provenance"]["git_dirty"] is True  # p/BUILD.marin is untracked

    subprocess.run([*git, "add", "p"], cwd=ws, check=True)
    subprocess.run([*git, "commit", "-qm", "experiment"], cwd=ws, check=True)
    (ws / "p/BUILD.marin").write_text('genrule(name = "x", outs = ["x.txt"], cmd = "echo y > $@")\n')
    subprocess.run([*git, "commit", "-qam", "edit"], cwd=ws, check=True)
    build_json(ws, "//p:x")  # cache/ and .marinbuild/ are untracked, and do not count
    assert show(ws, "//p:x")["provenance"]["git_dirty"] is False
