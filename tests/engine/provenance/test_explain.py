"""`marinbuild explain` names the ingredient that changed, for each kind of change, and
rule code drift is reported (not rebuilt) unless --strict-code makes code identity."""

from __future__ import annotations

import json

from conftest import build_json, run_cli, statuses

PY_STEP = """\
    genrule(name = "words", srcs = ["data.txt"], outs = ["words.txt"], cmd = "tr -s ' ' '\\\\n' < $< | sort > $@")
    genrule(name = "count", srcs = [":words"], outs = ["count.txt"], cmd = "wc -l < $< > $@")
    py_step(
        name = "train",
        fn = "step.py:run",
        config = {"model": {"layers": 2}, "optimizer": {"learning_rate": 0.0003, "betas": [0.9, 0.95]}},
        deps = [":count"],
    )
    """
STEP = """\
    def run(ctx):
        (ctx.out / "config.json").write_text(repr(ctx.attrs["config"]))
    """


def explain(ws, label: str, *options: str) -> dict:
    rc, out, err = run_cli(ws, "explain", "--json", *options, label)
    assert rc == 0, err
    return json.loads(out)


def test_explain_names_each_kind_of_change(make_workspace):
    ws = make_workspace({"p/BUILD.marin": PY_STEP, "p/step.py": STEP, "p/data.txt": "b a c\n"})
    build_json(ws, "//p:all")
    cached = explain(ws, "//p:train")
    assert cached["status"] == "cached" and cached["changes"] == []
    assert "config.optimizer.learning_rate = 0.0003" in cached["ingredients"]
    assert "rule py_step version 1" in cached["ingredients"]

    # An attribute deep in a nested config.
    build_file = ws / "p/BUILD.marin"
    build_file.write_text(build_file.read_text().replace("0.0003", "0.001"))
    nested = explain(ws, "//p:train")
    assert nested["status"] == "would-run"
    assert nested["changes"] == ["config.optimizer.learning_rate: 0.0003 → 0.001"]
    assert nested["previous_key"] == cached["key"] and nested["key"] != cached["key"]

    # A source file: named on the step that reads it; its dependents wait for its output.
    (ws / "p/data.txt").write_text("b a d\n")
    source = explain(ws, "//p:words")
    assert source["changes"] == ["source data.txt changed"]
    pending = explain(ws, "//p:count")
    assert pending["status"] == "pending" and [item["label"] for item in pending["upstream"]] == ["//p:words"]
    assert pending["upstream"][0]["changes"] == ["source data.txt changed"]

    # A dependency's output, once that dependency is rebuilt.
    build_json(ws, "//p:words")
    assert explain(ws, "//p:count")["changes"] == ["dependency //p:words output changed"]

    # Several changes at once, and --explain on a build gives one line per step that runs.
    build_file.write_text(build_file.read_text().replace('"layers": 2', '"layers": 4'))
    rc, out, err = run_cli(ws, "build", "//p:all", "--explain", "--jobs", "1")
    assert rc == 0, err
    assert "built //p:count" in err and ": dependency //p:words output changed" in err
    train_line = next(line for line in err.splitlines() if "built //p:train" in line)
    # //p:count was rebuilt to the same bytes (still three words): early cutoff, not a change.
    assert train_line.endswith(": config.model.layers: 2 → 4; config.optimizer.learning_rate: 0.0003 → 0.001")


def test_early_cutoff_explained(make_workspace):
    """A dependency rebuilt to identical bytes changes nothing downstream."""
    ws = make_workspace({"p/BUILD.marin": PY_STEP, "p/step.py": STEP, "p/data.txt": "b a c\n"})
    build_json(ws, "//p:all")
    (ws / "p/data.txt").write_text("c b a\n")  # other bytes, the same sorted words
    rebuilt = build_json(ws, "--explain", "//p:all")
    assert statuses(rebuilt) == {"//p:words": "built", "//p:count": "cached", "//p:train": "cached"}
    assert rebuilt["by_label"]["//p:words"]["reason"] == "source data.txt changed"


RULE_MODULE = """\
    from marinbuild.targets import Attr, Rule
    from marinbuild.targets import attrs as types


    def _write(ctx):
        (ctx.out / "out.txt").write_text(ctx.attrs["text"] + "{suffix}")


    writer = Rule(name="writer", impl=_write, version={version}, attrs={{"text": Attr(types.STRING)}})
    """


def rule_workspace(make_workspace, version: int = 1, suffix: str = "") -> object:
    return make_workspace(
        {
            "myrules.py": RULE_MODULE.format(version=version, suffix=suffix),
            "p/BUILD.marin": 'writer(name = "w", text = "hi")\n',
        },
        config='rules = ["myrules"]\n',
    )


def test_rule_version_and_code_drift(make_workspace):
    ws = rule_workspace(make_workspace)
    first = build_json(ws, "//p:w")
    module = ws / "myrules.py"

    # The code changes, the version does not: the output is still served, with a warning
    # from build, explain and query stale().
    module.write_text(module.read_text().replace('+ ""', '+ "!"'))
    again = build_json(ws, "//p:w")
    assert statuses(again) == {"//p:w": "cached"} and again["by_label"]["//p:w"]["code_changed"] is True
    assert (
        "rule writer: rule code changed since this output was built (//p:w); bump the rule's version to rebuild"
        in again["stderr"]
    )
    drift = explain(ws, "//p:w")
    assert drift["status"] == "cached" and drift["code_changed"] is True
    assert "rule code changed since this output was built" in drift["summary"]
    rc, out, err = run_cli(ws, "query", "stale(//...)")
    assert rc == 0 and "//p:w: rule code changed since this output was built" in err

    # --strict-code: the source is part of the key, so the step runs.
    strict = explain(ws, "//p:w", "--strict-code")
    assert strict["status"] == "would-run"
    assert strict["changes"][0].startswith("rule code is part of the key with --strict-code")
    strict_build = build_json(ws, "--strict-code", "//p:w")
    assert statuses(strict_build) == {"//p:w": "built"}
    assert (
        ws
        / "cache/out"
        / strict_build["by_label"]["//p:w"]["key"][:2]
        / strict_build["by_label"]["//p:w"]["key"]
        / "out.txt"
    ).read_text() == "hi!"

    # Bumping the version rebuilds, and explain names it.
    module.write_text(module.read_text().replace("version=1", "version=2"))
    bumped = explain(ws, "//p:w")
    assert bumped["status"] == "would-run" and bumped["previous_key"] == first["by_label"]["//p:w"]["key"]
    assert bumped["code_changed"] is True  # that entry was built by the old code, too
    assert bumped["changes"] == [
        "rule writer version 1 → 2",
        f"also: rule code changed since {bumped['previous_key'][:12]} was built",
    ]
