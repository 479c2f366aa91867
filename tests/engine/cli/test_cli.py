"""The command line: output formats, exit statuses, --dry-run, where, --jobs, invocations, and the
shared options (--store, --workspace, --unsafe-no-locking) before or after any command."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from conftest import (
    ac_entries,
    attempt_records,
    build_json,
    cli_env,
    invocations,
    output_text,
    parse_command_line,
    run_cli,
    statuses,
    store_files,
)

import marinbuild
from marinbuild.actions.bookkeeping.results import BuildResult, NullReporter, Status, TargetResult, pending_json
from marinbuild.actions.execution.build_options import BuildOptions
from marinbuild.cli.main import cli
from marinbuild.commands.build import build as build_targets
from marinbuild.session import Session
from marinbuild.targets.rule import Resources

CHAIN = """\
    genrule(name = "first", srcs = ["in.txt"], outs = ["first.txt"], cmd = "cat $< > $@")
    genrule(name = "second", srcs = [":first"], outs = ["second.txt"], cmd = {second_cmd!r})
    genrule(name = "third", srcs = [":second"], outs = ["third.txt"], cmd = "cat $< > $@; echo 3 >> $@")
    genrule(name = "alone", outs = ["alone.txt"], cmd = "echo alone > $@")
    """
FIRST, SECOND, THIRD, ALONE = "//pkg:first", "//pkg:second", "//pkg:third", "//pkg:alone"


def chain_files(second_cmd: str = "cat $< > $@; echo 2 >> $@") -> dict[str, str]:
    return {"pkg/BUILD.marin": CHAIN.format(second_cmd=second_cmd), "pkg/in.txt": "in\n"}


def set_second_cmd(ws: Path, cmd: str) -> None:
    (ws / "pkg/BUILD.marin").write_text(textwrap.dedent(CHAIN.format(second_cmd=cmd)))


# -- output formats -----------------------------------------------------------------------------


def test_json_output_shape(make_workspace):
    ws = make_workspace(chain_files())
    rc, out, err = run_cli(ws, "build", "--json", "//pkg:all")
    assert rc == 0, err
    data = json.loads(out)  # stdout is exactly one JSON object; progress goes to stderr
    assert set(data) == {"targets", "counts"}
    assert [item["label"] for item in data["targets"]] == [FIRST, SECOND, THIRD, ALONE]
    for item in data["targets"]:
        assert {"label", "key", "status", "output", "duration_s"} <= set(item)
        assert item["status"] == "built"
        assert len(item["key"]) == 64 and int(item["key"], 16) >= 0
        assert Path(item["output"]).is_dir()
        assert Path(item["output"]).is_relative_to(ws / "cache" / "out")
        assert isinstance(item["duration_s"], (int, float)) and item["duration_s"] >= 0
    assert data["counts"] == {"built": 4, "cached": 0, "failed": 0, "skipped": 0}
    assert "4 built" in err


def test_json_output_has_one_line_per_target_whatever_the_reasons_say():
    tricky = 'exit 1: printed }, {"label": "//x:y"} and\na newline'
    result = BuildResult(
        [FIRST, SECOND],
        {
            FIRST: TargetResult(FIRST, Status.FAILED, "k1", reason=tricky),
            SECOND: TargetResult(SECOND, Status.SKIPPED, reason=f"dependency {FIRST} failed"),
        },
    )
    text = result.to_json_text()
    assert json.loads(text) == result.to_json()
    lines = text.splitlines()
    assert [line.strip().startswith('{"label": ') for line in lines[2:4]] == [True, True]
    assert len(lines) == 7


def test_targets_json_is_made_again_when_a_result_changes():
    """The text the invocation record and --json share is kept once made: a result replaced
    since (a dry run's notes are added after it ran) must show in it."""
    result = BuildResult([FIRST], {FIRST: TargetResult(FIRST, Status.WOULD_RUN, "k1")})
    assert json.loads(result.targets_json())[0]["status"] == "would-run"
    assert result.targets_json() is result.targets_json()  # kept, not made again
    result.results[FIRST] = TargetResult(FIRST, Status.WOULD_RUN, "k1", reason="would resume from step 10")
    assert json.loads(result.targets_json())[0]["reason"] == "would resume from step 10"
    assert json.loads(result.to_json_text())["targets"] == json.loads(result.targets_json())


@pytest.mark.parametrize(
    "labels",
    [[], [FIRST], [FIRST, SECOND], ['q"uote', "back\\slash", 'a", "b', "ünï ☃", '", "', '\\"', ""]],
)
def test_pending_json_is_json_dumps_of_the_pending_targets(labels):
    """The record a build writes first is made from one dump of its labels: whatever the
    labels hold, it must be the JSON of the pending targets, byte for byte."""
    expected = json.dumps([{"label": label, "key": None, "status": "pending"} for label in labels])
    assert pending_json(labels) == expected


def test_plain_build_prints_outputs_and_default_command_is_build(make_workspace):
    ws = make_workspace(chain_files())
    rc, out, err = run_cli(ws, "//pkg:third")  # no `build`: it is the default command
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{THIRD}: ")
    output = Path(lines[0].split(": ", 1)[1])
    assert (output / "third.txt").read_text() == "in\n2\n3\n"


# A rule whose outputs have a headline, as train_lm's and eval_lm's have their losses.
SCORED_RULE = """
from marinbuild.targets import Rule


def _score(ctx):
    (ctx.out / "loss.txt").write_text("4.815")


def _headline(out):
    return "eval loss " + (out / "loss.txt").read_text()


scored = Rule(name="scored", impl=_score, attrs={}, headline=_headline)
"""


def test_a_build_of_many_targets_still_prints_each_headline(make_workspace):
    """Past 10 targets requested, where each output is goes unprinted ('marinbuild where'),
    but not a target's headline: a data mix of 22 targets still ends with its eval loss."""
    genrules = "".join(f'genrule(name = "g{n}", outs = ["g{n}.txt"], cmd = "echo {n} > $@")\n' for n in range(12))
    files = {"scored.py": SCORED_RULE, "pkg/BUILD.marin": genrules + 'scored(name = "eval")\n'}
    ws = make_workspace(files, 'rules = ["scored"]\n')
    for status in ("built", "cached"):
        rc, out, err = run_cli(ws, "build", "//pkg:all")
        assert rc == 0 and f"13 targets: {13 if status == 'built' else 0} built" in err, err
        eval_output = json.loads(run_cli(ws, "build", "--json", "//pkg:eval")[1])["targets"][0]["output"]
        assert out.splitlines() == [
            f"//pkg:eval: {eval_output}",
            "  eval loss 4.815",
            "12 more targets requested; 'marinbuild where LABEL' prints where one is",
        ], out


def test_version():
    done = subprocess.run([sys.executable, "-m", "marinbuild", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and marinbuild.__version__ in done.stdout


def test_labels_are_printed_verbatim_on_stderr(make_workspace):
    """Labels such as //pkg:b or //pkg:x must not be rendered as emoji (rich's :b: / :x: codes)."""
    ws = make_workspace(
        {
            "pkg/BUILD.marin": """\
                genrule(name = "x", outs = ["x.txt"], cmd = "echo x > $@")
                genrule(name = "b", outs = ["b.txt"], cmd = "exit 1")
                """
        }
    )
    first = build_json(ws, "-k", "//pkg:all", expect_rc=1)
    assert "failed //pkg:b: " in first["stderr"], first["stderr"]
    (Path(first["by_label"]["//pkg:x"]["output"]) / "x.txt").write_text("damaged\n")
    second = build_json(ws, "-k", "//pkg:all", expect_rc=1)
    assert "WARNING: //pkg:x: output file x.txt" in second["stderr"], second["stderr"]


# -- 8. --dry-run -------------------------------------------------------------------------------


def _dry_lines(out: str) -> dict[str, tuple[str, str]]:
    """{label: (status, rest of the line)} from plain --dry-run output."""
    found = {}
    for line in out.splitlines():
        status, label, *rest = line.split(None, 2)
        found[label] = (status, rest[0] if rest else "")
    return found


def test_dry_run_on_a_fresh_workspace_writes_nothing(make_workspace):
    ws = make_workspace(chain_files())
    rc, out, err = run_cli(ws, "build", "--dry-run", "//pkg:all")
    assert rc == 0, err
    lines = _dry_lines(out)
    assert lines[FIRST][0] == "would-run" and lines[ALONE][0] == "would-run"
    assert lines[SECOND][0] == "pending" and FIRST in lines[SECOND][1]
    assert lines[THIRD][0] == "pending"
    assert store_files(ws / "cache") == {}, "a dry run must not write to the store"


def test_dry_run_lists_what_waits_dependencies_first(make_workspace):
    ws = make_workspace(
        {
            "pkg/BUILD.marin": """\
        genrule(name = "a", outs = ["a.txt"], cmd = "echo a > $@")
        genrule(name = "b", srcs = [":a"], outs = ["b.txt"], cmd = "cat $< > $@")
        genrule(name = "c", srcs = [":a", ":b"], outs = ["c.txt"], cmd = "cat $(SRCS) > $@")
        """
        }
    )
    rc, out, err = run_cli(ws, "build", "--dry-run", "//pkg:c")
    assert rc == 0, err
    expected = [("//pkg:a", "would-run"), ("//pkg:b", "pending"), ("//pkg:c", "pending")]
    assert [(label, status) for label, (status, _) in _dry_lines(out).items()] == expected
    # Each target's line is printed once, on stdout: stderr has only the counts.
    [counts] = err.splitlines()
    assert counts.startswith("3 targets: 0 built, 0 cached"), err


def test_dry_run_says_what_would_run_and_why_and_writes_nothing(make_workspace):
    ws = make_workspace(chain_files())
    build_json(ws, "//pkg:all")
    set_second_cmd(ws, "cat $< > $@; echo two >> $@")
    store = ws / "cache"
    before = store_files(store)

    rc, out, err = run_cli(ws, "build", "--dry-run", "//pkg:all")
    assert rc == 0, err
    lines = _dry_lines(out)
    assert {label: status for label, (status, _) in lines.items()} == {
        FIRST: "cached",
        SECOND: "would-run",
        THIRD: "pending",
        ALONE: "cached",
    }
    assert lines[SECOND][1].strip("()"), "a would-run line says why"
    assert SECOND in lines[THIRD][1], "a pending line names the dependency it waits for"

    dry = build_json(ws, "--dry-run", "//pkg:all")
    assert statuses(dry) == {FIRST: "cached", SECOND: "would-run", THIRD: "pending", ALONE: "cached"}
    assert dry["by_label"][SECOND]["reason"] and SECOND in dry["by_label"][THIRD]["reason"]

    assert store_files(store) == before, "a dry run must not write to the store"
    # ... and it really ran nothing: the real build still has the work to do.
    real = build_json(ws, "//pkg:all")
    assert statuses(real) == {FIRST: "cached", SECOND: "built", THIRD: "built", ALONE: "cached"}
    assert output_text(real, THIRD, "third.txt") == "in\ntwo\n3\n"


# -- 12. where ----------------------------------------------------------------------------------


def test_where_prints_the_output_dir_of_a_built_target(make_workspace):
    ws = make_workspace(chain_files())
    built = build_json(ws, "//pkg:all")
    before = store_files(ws / "cache")
    rc, out, err = run_cli(ws, "where", THIRD)
    assert rc == 0, err
    assert out.strip() == built["by_label"][THIRD]["output"]
    assert (Path(out.strip()) / "third.txt").read_text() == "in\n2\n3\n"
    assert store_files(ws / "cache") == before, "where must not write to the store"


def test_where_for_an_unbuilt_or_stale_target_exits_2_with_a_hint(make_workspace):
    ws = make_workspace(chain_files())
    rc, out, err = run_cli(ws, "where", THIRD)
    assert rc == 2 and out == ""
    assert "not built" in err and "hint:" in err and f"marinbuild build {THIRD}" in err

    build_json(ws, "//pkg:all")
    set_second_cmd(ws, "cat $< > $@; echo changed >> $@")  # THIRD's key now depends on a new SECOND
    rc, out, err = run_cli(ws, "where", THIRD)
    assert rc == 2 and "hint:" in err
    rc, out, err = run_cli(ws, "where", FIRST)
    assert rc == 0 and out.strip()


def test_where_takes_exactly_one_label(make_workspace):
    ws = make_workspace(chain_files())
    build_json(ws, "//pkg:all")
    rc, out, err = run_cli(ws, "where", "//pkg:all")
    assert rc == 2 and "marinbuild: error:" in err


# -- 13. invocation records ---------------------------------------------------------------------


def test_one_invocation_record_per_build(make_workspace):
    ws = make_workspace(
        {
            **chain_files(),
            "bad/BUILD.marin": 'genrule(name = "fails", outs = ["f.txt"], cmd = "exit 1")\n',
        }
    )
    store = ws / "cache"
    assert invocations(store) == []
    runs = [
        build_json(ws, "//pkg:all"),
        build_json(ws, "//pkg:all"),  # all cached: still recorded
        build_json(ws, "//pkg:third", "//bad:fails", "-k", expect_rc=1),
    ]
    build_json(ws, "--dry-run", "//pkg:all")  # not a build: no record
    run_cli(ws, "where", THIRD)
    records = [json.loads(path.read_text()) for path in invocations(store)]
    assert len(records) == 3
    records.sort(key=lambda record: (record["started"], record["id"]))
    ids = {record["id"] for record in records}
    assert len(ids) == 3
    for record, run in zip(records, runs):
        assert record["counts"] == run["counts"]
        assert {t["label"]: (t["key"], t["status"]) for t in record["targets"]} == {
            t["label"]: (t["key"], t["status"]) for t in run["targets"]
        }
        for field in ("patterns", "started", "duration_s", "user", "host", "marinbuild"):
            assert field in record
    assert records[2]["patterns"] == ["//pkg:third", "//bad:fails"]


# -- 9. --jobs and resources ----------------------------------------------------------------------

TIMED = (
    'genrule(name = "{name}", outs = ["{name}.txt"], '
    'cmd = "date +%s.%N > $@; sleep {sleep}; date +%s.%N >> $@"{extra})\n'
)


def _interval(output: str | Path, name: str) -> tuple[float, float]:
    start, end = (Path(output) / f"{name}.txt").read_text().split()
    return float(start), float(end)


def _overlap(one: tuple[float, float], two: tuple[float, float]) -> bool:
    return max(one[0], two[0]) < min(one[1], two[1])


@pytest.mark.parametrize(("jobs", "parallel"), [(2, True), (1, False)])
def test_jobs_runs_independent_steps_at_once(make_workspace, jobs, parallel):
    ws = make_workspace(
        {"pkg/BUILD.marin": TIMED.format(name="s1", sleep=1, extra="") + TIMED.format(name="s2", sleep=1, extra="")}
    )
    result = build_json(ws, "--jobs", str(jobs), "//pkg:all")
    one = _interval(result["by_label"]["//pkg:s1"]["output"], "s1")
    two = _interval(result["by_label"]["//pkg:s2"]["output"], "s2")
    assert _overlap(one, two) is parallel, (one, two)
    # The attempt records agree (their times have one-second resolution: compare strictly).
    records = [attempt_records(ws / "cache", result["by_label"][label]["key"])[0] for label in ("//pkg:s1", "//pkg:s2")]
    starts = [record["started"] for record in records]
    finishes = [record["finished"] for record in records]
    if parallel:
        assert max(starts) < min(finishes), records
    else:
        assert max(starts) >= min(finishes), records


@pytest.mark.parametrize(
    ("resources", "parallel"),
    [
        ({"cpu": 2}, False),
        ({"memory_gb": 60}, False),
        ({"cpu": 1}, True),
    ],
    ids=["cpu-2-of-2", "memory-60-of-100", "cpu-1-of-2"],
)
def test_declared_resources_are_never_oversubscribed(make_workspace, resources, parallel):
    extra = f", resources = {resources!r}"
    ws = make_workspace(
        {
            "pkg/BUILD.marin": TIMED.format(name="h1", sleep=0.8, extra=extra)
            + TIMED.format(name="h2", sleep=0.8, extra=extra)
        }
    )
    options = BuildOptions(jobs=2, capacity=Resources(cpu=2, memory_gb=100))
    result = build_targets(Session.open(ws), ["//pkg:all"], options, NullReporter())
    assert result.ok
    one = _interval(result.results["//pkg:h1"].output, "h1")
    two = _interval(result.results["//pkg:h2"].output, "h2")
    assert _overlap(one, two) is parallel, (one, two)
    assert len(ac_entries(ws / "cache")) == 2


def test_a_step_bigger_than_the_machine_still_runs_alone(make_workspace):
    ws = make_workspace({"pkg/BUILD.marin": TIMED.format(name="huge", sleep=0.1, extra=', resources = {"cpu": 64}')})
    options = BuildOptions(jobs=2, capacity=Resources(cpu=2, memory_gb=100))
    result = build_targets(Session.open(ws), ["//pkg:all"], options, NullReporter())
    assert result.ok and result.results["//pkg:huge"].status.value == "built"


# -- the shared options after the command, as with Bazel ----------------------------------------


def _leaf_command_lines(group: click.Group, prefix: tuple[str, ...] = ()) -> list[list[str]]:
    """A command line for every command of the CLI, nested ones included, with a sample value
    for each required argument: a command added later is covered without being listed."""
    lines = []
    with click.Context(group) as ctx:
        commands = {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}
    for name, command in commands.items():
        if isinstance(command, click.Group):
            lines += _leaf_command_lines(command, (*prefix, name))
            continue
        required = [param for param in command.params if isinstance(param, click.Argument) and param.required]
        lines.append([*prefix, name, *("//pkg:x" for _param in required)])
    return lines


COMMAND_LINES = [*_leaf_command_lines(cli), ["//pkg:x"]]  # and the implicit build


@pytest.mark.parametrize("command", COMMAND_LINES, ids=[" ".join(line) for line in COMMAND_LINES])
def test_shared_options_are_taken_after_every_command(command, tmp_path):
    after = parse_command_line([*command, "--store", "S", "--workspace", str(tmp_path), "--unsafe-no-locking"])
    assert after[-1].obj == {"workspace": tmp_path, "store_url": "S", "unsafe_no_locking": True}
    before = parse_command_line(["--store", "S", "--workspace", str(tmp_path), "--unsafe-no-locking", *command])
    assert before[-1].obj == after[-1].obj
    assert parse_command_line(command)[-1].obj == {"workspace": None, "store_url": None, "unsafe_no_locking": False}


@pytest.mark.parametrize(
    ("args", "store"),
    [
        (["--store", "A", "build", "--store", "B", "//pkg:x"], "B"),
        (["--store", "A", "//pkg:x", "--store", "B"], "B"),
        (["--store", "A", "cache", "--store", "B", "gc", "--store", "C"], "C"),
        (["--store", "A", "cache", "--store", "B", "gc"], "B"),
        (["--store", "A", "cache", "gc"], "A"),
    ],
)
def test_given_before_and_after_the_command_the_one_after_wins(args, store):
    assert parse_command_line(args)[-1].obj["store_url"] == store


def test_shared_options_mix_with_subtractions_and_build_options():
    (_group, build_context) = parse_command_line(
        ["build", "//pkg:all", "--store", "S", "-//pkg:x", "--unsafe-no-locking", "-j", "2", "-:y"]
    )
    assert build_context.params["patterns"] == ("//pkg:all", "-//pkg:x", "-:y")
    assert build_context.params["jobs"] == 2
    assert build_context.obj == {"workspace": None, "store_url": "S", "unsafe_no_locking": True}


def test_store_and_workspace_after_the_command_are_used(make_workspace, tmp_path):
    ws = make_workspace(chain_files())
    store = tmp_path / "elsewhere"

    def marinbuild(*args: str, cwd: Path) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "marinbuild", *args], cwd=cwd, capture_output=True, text=True, env=cli_env()
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    built = json.loads(marinbuild("build", "--json", "//pkg:all", "--store", str(store), cwd=ws))
    assert {item["status"] for item in built["targets"]} == {"built"}
    assert all(Path(item["output"]).is_relative_to(store) for item in built["targets"])
    assert not (ws / "cache").exists(), "--store after the command must replace the default store"
    # The implicit build, from outside the workspace; the store given after the command wins.
    out = marinbuild(
        "--store", str(ws / "other"), "//pkg:third", "--workspace", str(ws), "--store", str(store), cwd=tmp_path
    )
    assert out.startswith(f"{THIRD}: {store}")
    assert not (ws / "other").exists()
    # A store without leases needs --unsafe-no-locking, after the command too.
    marinbuild("build", "//pkg:alone", "--store", "memory://mb", "--unsafe-no-locking", cwd=ws)


def test_a_build_on_a_local_store_imports_no_remote_store_machinery(make_workspace):
    """Start-up is most of a no-op: a build on the local store, cold or cached, must not pay
    for an event loop, TLS or fsspec (imported by remote stores only)."""
    ws = make_workspace({"pkg/BUILD.marin": 'genrule(name = "a", outs = ["a.txt"], cmd = "echo a > $@")\n'})
    script = textwrap.dedent(
        """\
        import json, sys
        from marinbuild.cli.main import cli
        try:
            cli(["--workspace", sys.argv[1], "build", "//..."], standalone_mode=False)
        except SystemExit:
            pass
        remote = tuple(sys.argv[2:])
        print(json.dumps(sorted(name for name in sys.modules if name in remote or name.startswith(remote))))
        """
    )
    remote = ["asyncio", "ssl", "fsspec", "gcsfs", "aiohttp", "marinbuild.store.remote", "marinbuild.store.gcs"]
    for build in ("cold", "cached"):
        done = subprocess.run(
            [sys.executable, "-c", script, str(ws), *remote], capture_output=True, text=True, check=True
        )
        imported = json.loads(done.stdout.strip().splitlines()[-1])
        assert imported == [], (build, imported)
