"""Steps run hermetically: a clean, recorded environment; a sandbox on demand; a time limit.

docs/guarantees.md, "Steps are hermetic". Each case failed before
marinbuild/actions/execution/hermetic.py: a genrule saw the builder's whole environment, a
step could write into the workspace undetected, and a step could run for ever.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from conftest import attempt_records, build_json, cli_env, keys, output_text, run_cli, statuses

from marinbuild.actions.execution.hermetic import recorded_environment, step_environment

SECRET = "MARINBUILD_TEST_SECRET_TOKEN"


def _cli(ws: Path, *args: str, **env: str) -> tuple[int, str, str]:
    """The CLI with extra variables in the builder's environment."""
    return run_cli(ws, *args, env={**cli_env(), **env})


ENV_BUILD = {"pkg/BUILD.marin": 'genrule(name = "env", outs = ["env.txt"], cmd = "env | sort > $@")'}


def test_a_step_sees_only_the_allow_list_and_its_environment_is_recorded(make_workspace):
    ws = make_workspace(ENV_BUILD)
    rc, out, err = _cli(ws, "build", "--json", "//pkg:env", **{SECRET: "hunter2", "LC_ALL": "C.UTF-8"})
    assert rc == 0, err
    key = json.loads(out)["targets"][0]["key"]
    seen = (ws / "cache" / "out" / key[:2] / key / "env.txt").read_text()
    assert "hunter2" not in seen and SECRET not in seen
    assert "PATH=" in seen and "LC_ALL=C.UTF-8" in seen
    [record] = attempt_records(ws / "cache", key)
    assert record["environment"]["LC_ALL"] == "C.UTF-8" and SECRET not in record["environment"]


def test_the_workspace_passes_or_sets_more_and_that_changes_no_key(make_workspace):
    plain = make_workspace(ENV_BUILD)
    passing = make_workspace(ENV_BUILD, config=f'action_env = ["{SECRET}", "MODE=fast"]\n')
    rc, out, err = _cli(passing, "build", "--json", "//pkg:env", **{SECRET: "hunter2"})
    assert rc == 0, err
    key = json.loads(out)["targets"][0]["key"]
    seen = (passing / "cache" / "out" / key[:2] / key / "env.txt").read_text()
    assert f"{SECRET}=hunter2" in seen and "MODE=fast" in seen
    [record] = attempt_records(passing / "cache", key)
    assert record["environment"][SECRET] == "(not recorded)" and record["environment"]["MODE"] == "fast"
    # Where a step logs, or which credentials it holds, is not what it computes.
    assert keys(build_json(plain, "--dry-run", "//pkg:env")) == {"//pkg:env": key}
    rc, out, err = run_cli(make_workspace(ENV_BUILD, config='action_env = ["not a name"]\n'), "build", "//pkg:env")
    assert rc == 2 and "action_env" in err


def test_step_environment_allow_list():
    builder = {"PATH": "/bin", "HOME": "/root", "LC_ALL": "C", "JAX_PLATFORMS": "cpu", "AWS_SECRET": "x", "FOO": "1"}
    assert step_environment(builder, ()) == {"PATH": "/bin", "HOME": "/root", "LC_ALL": "C", "JAX_PLATFORMS": "cpu"}
    assert step_environment(builder, ("FOO", "BAR=2", "ABSENT"))["FOO"] == "1"
    assert step_environment(builder, ("BAR=2",))["BAR"] == "2" and "ABSENT" not in step_environment(
        builder, ("ABSENT",)
    )
    assert recorded_environment({"WANDB_API_KEY": "k", "PATH": "/bin"}) == {
        "PATH": "/bin",
        "WANDB_API_KEY": "(not recorded)",
    }


# -- the sandbox ----------------------------------------------------------------------------

WRITER = {
    "pkg/BUILD.marin": """
        py_step(name = "writer", fn = "steps.py:write")
        genrule(
            name = "scratchpad",
            outs = ["t.txt"],
            cmd = "echo private > /tmp/mb-sandbox-probe; cat /tmp/mb-sandbox-probe > $@",
        )
    """,
    "pkg/steps.py": """
        def write(ctx):
            (ctx.workspace / "leaked.txt").write_text("written outside the step's output")
            (ctx.out / "ok.txt").write_text("ok")
    """,
}


def test_without_the_sandbox_a_write_outside_goes_unnoticed(make_workspace):
    ws = make_workspace(WRITER)
    assert statuses(build_json(ws, "//pkg:writer")) == {"//pkg:writer": "built"}
    assert (ws / "leaked.txt").exists()


def test_the_sandbox_refuses_writes_outside_the_steps_own_directories(make_workspace):
    ws = make_workspace(WRITER)
    failed = build_json(ws, "--sandbox", "//pkg:writer", expect_rc=1)
    assert "Read-only file system" in failed["by_label"]["//pkg:writer"]["reason"]
    assert not (ws / "leaked.txt").exists()
    assert not (ws / "cache" / "ac").exists(), "nothing published"
    # /tmp is the step's own: usable, and gone with it.
    probe = Path("/tmp/mb-sandbox-probe")
    probe.unlink(missing_ok=True)
    built = build_json(ws, "--sandbox", "//pkg:scratchpad")
    assert statuses(built) == {"//pkg:scratchpad": "built"} and not probe.exists()
    [record] = attempt_records(ws / "cache", built["by_label"]["//pkg:scratchpad"]["key"])
    assert record["sandbox"] is True


def test_the_sandbox_is_a_workspace_setting(make_workspace):
    ws = make_workspace(WRITER, config="sandbox = true\n")
    build_json(ws, "//pkg:writer", expect_rc=1)
    assert not (ws / "leaked.txt").exists()
    assert statuses(build_json(ws, "--no-sandbox", "//pkg:writer")) == {"//pkg:writer": "built"}


JAX_CACHE = {
    "pkg/BUILD.marin": """
        genrule(
            name = "compiles",
            outs = ["c.txt"],
            cmd = "echo $$JAX_COMPILATION_CACHE_DIR > $@; touch $$JAX_COMPILATION_CACHE_DIR/program",
        )
    """,
}


def test_steps_share_this_machines_compilation_cache_writable_in_the_sandbox_and_in_no_key(make_workspace):
    ws = make_workspace(JAX_CACHE)
    built = build_json(ws, "--sandbox", "//pkg:compiles")
    cache = ws / ".marinbuild" / "jax-cache"
    key = built["by_label"]["//pkg:compiles"]["key"]
    assert (ws / "cache" / "out" / key[:2] / key / "c.txt").read_text().strip() == str(cache)
    assert (cache / "program").exists()
    [record] = attempt_records(ws / "cache", key)
    assert record["environment"]["JAX_COMPILATION_CACHE_DIR"] == str(cache)
    # Another machine's (or the user's own) cache directory is not another recipe.
    rc, out, err = _cli(ws, "build", "--dry-run", "--json", "//pkg:compiles", JAX_COMPILATION_CACHE_DIR="/elsewhere")
    assert rc == 0 and keys(json.loads(out)) == {"//pkg:compiles": key}, err


# -- timeouts -------------------------------------------------------------------------------

SLEEPER = {
    "pkg/BUILD.marin": """
        genrule(name = "slow", outs = ["s.txt"], cmd = "(sleep 41.7 &); sleep 40.3; echo > $@", timeout = 1)
        genrule(name = "slow_default", outs = ["d.txt"], cmd = "sleep 40.4; echo > $@")
    """,
}


def _running(pattern: str) -> bool:
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0


def test_a_step_past_its_timeout_is_killed_with_its_children_and_recorded(make_workspace):
    ws = make_workspace(SLEEPER, config="timeout_s = 1.5\n")
    started = time.monotonic()
    failed = build_json(ws, "--keep-going", "//pkg:all", expect_rc=1)
    assert time.monotonic() - started < 35, "the steps were killed, not left to end their 40 s sleeps"
    for label, limit in (("//pkg:slow", "1"), ("//pkg:slow_default", "1.5")):
        result = failed["by_label"][label]
        assert result["status"] == "failed" and f"ran past its timeout of {limit} s" in result["reason"], result
        [record] = attempt_records(ws / "cache", result["key"])
        assert record["status"] == "timed_out"
    assert not (ws / "cache" / "ac").exists(), "nothing published"
    time.sleep(0.5)
    assert not _running("sleep 41.7") and not _running("sleep 40.3"), "the step's whole process group is killed"
    rc, out, err = run_cli(ws, "build", "//pkg:slow")
    assert rc == 1 and "timeout" in err


# $(SRCS) over 10,000 files; a 5 MB command (built in Starlark, not written out); a command
# that reads standard input and lists its working directory; a small one whose key is pinned.
MANY_FILES = 10_000
LONG_COMMANDS = {
    "pkg/BUILD.marin": """\
        genrule(
            name = "concat",
            srcs = glob(["many/*.txt"]),
            outs = ["all.txt"],
            cmd = 'for f in $(SRCS); do read -r line < "$$f"; echo "$$line"; done > $@',
        )
        genrule(
            name = "long",
            outs = ["length.txt"],
            cmd = "V=" + "x" * 5000000 + "\\nprintf %s \\"$$V\\" | wc -c > $@",
        )
        genrule(
            name = "stdin",
            outs = ["read.txt", "listed.txt"],
            cmd = "cat > $(RULEDIR)/read.txt; ls -A > $(RULEDIR)/listed.txt",
        )
        genrule(name = "copy", srcs = ["in.txt"], outs = ["out.txt"], cmd = "cat $(SRCS) > $@")
        """,
    "pkg/in.txt": "input\n",
    **{f"pkg/many/{index:05d}.txt": f"line {index}\n" for index in range(MANY_FILES)},
}
# The key `copy` had when bash took the command as one argument: how the command reaches
# bash is not part of what it computes.
COPY_KEY = "3a1f1c3363c25febacd15298139e95620709c2127f3215d759a26a69fa749111"


def test_a_command_past_the_argument_limit_runs_in_and_out_of_the_sandbox_under_the_same_keys(make_workspace):
    ws = make_workspace(LONG_COMMANDS)
    plain = build_json(ws, "//pkg:all")
    boxed = build_json(ws, "--sandbox", "//pkg:all", store=str(ws / "sandboxed"))
    for built in (plain, boxed):
        assert set(statuses(built).values()) == {"built"}, built["stderr"]
        assert output_text(built, "//pkg:concat", "all.txt") == "".join(f"line {i}\n" for i in range(MANY_FILES))
        assert output_text(built, "//pkg:long", "length.txt").strip() == "5000000"
        # The command's standard input is empty, not its script; its working directory is empty.
        assert output_text(built, "//pkg:stdin", "read.txt") == output_text(built, "//pkg:stdin", "listed.txt") == ""
    assert keys(plain) == keys(boxed) and keys(plain)["//pkg:copy"] == COPY_KEY
