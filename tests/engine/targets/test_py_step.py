"""py_step: a Python function in a workspace file, run in its own process."""

from __future__ import annotations

import os
import time
from pathlib import Path

from conftest import attempt_logs, attempt_records, build_json, output_text, statuses, write_files

G, P, AFTER = "//pkg:g", "//pkg:p", "//pkg:after_p"

BUILD = """\
    genrule(name = "g", outs = ["g.txt"], cmd = "echo gee > $@")
    py_step(name = "p", fn = {fn!r}, config = {config!r}, deps = [":g"])
    genrule(name = "after_p", srcs = [":p"], outs = ["after.txt"], cmd = "cat $(SRCS) > $@; echo after >> $@")
    """

STEPS = """\
    import sys


    def make(ctx):
        n = ctx.attrs["config"]["n"]
        text = ctx.location("//pkg:g").read_text()
        ctx.log.info("making %d copies for %s", n, ctx.label)
        ctx.progress(1, 1, "step")
        (ctx.out / "result.txt").write_text(text * n)


    def explode(ctx):
        helper(ctx.attrs["config"]["n"])


    def helper(n):
        raise ValueError(f"bad value n={n}")


    def exit_hard(ctx):
        import os

        os._exit(7)


    def leaves_a_busy_thread(ctx):
        import threading

        import jax.numpy as jnp

        def spin():  # still inside XLA when the step returns, like a data loader's prefetch
            x = jnp.ones((256, 256))
            while True:
                x = ((x @ x) / 256.0).block_until_ready()

        threading.Thread(target=spin, daemon=True).start()
        (ctx.out / "result.txt").write_text("done\\n")
        print("the last line of the step", file=sys.stderr)
        ctx.log.info("the last log record of the step")


    def noisy(ctx):
        print("a line on stdout from the step")
        print("a line on stderr from the step", file=sys.stderr)
        (ctx.out / "result.txt").write_text("noisy\\n")
    """


def workspace(make_workspace, fn: str = "steps.py:make", config: dict | None = None) -> Path:
    return make_workspace({"pkg/BUILD.marin": BUILD.format(fn=fn, config=config or {"n": 3}), "pkg/steps.py": STEPS})


def set_build(ws: Path, fn: str = "steps.py:make", config: dict | None = None) -> None:
    write_files(ws, {"pkg/BUILD.marin": BUILD.format(fn=fn, config=config or {"n": 3})})


def edit_steps(ws: Path, old: str, new: str) -> None:
    path = ws / "pkg" / "steps.py"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_py_step_builds_with_config_and_inputs(make_workspace):
    ws = workspace(make_workspace)
    first = build_json(ws, "//pkg:all")
    assert statuses(first) == {G: "built", P: "built", AFTER: "built"}
    assert output_text(first, P, "result.txt") == "gee\n" * 3
    assert output_text(first, AFTER, "after.txt") == "gee\n" * 3 + "after\n"
    [log] = attempt_logs(ws / "cache", first["by_label"][P]["key"])
    assert f"making 3 copies for {P}" in log.read_text()

    second = build_json(ws, "//pkg:all")
    assert set(statuses(second).values()) == {"cached"}


def test_editing_the_function_file_reruns_the_step(make_workspace):
    ws = workspace(make_workspace)
    first = build_json(ws, "//pkg:all")
    edit_steps(ws, "write_text(text * n)", "write_text(text * (n + 1))")
    second = build_json(ws, "//pkg:all")
    assert statuses(second) == {G: "cached", P: "built", AFTER: "built"}
    assert output_text(second, P, "result.txt") == "gee\n" * 4
    assert second["by_label"][P]["key"] != first["by_label"][P]["key"]


def test_editing_the_file_without_changing_the_output_cuts_off_early(make_workspace):
    ws = workspace(make_workspace)
    build_json(ws, "//pkg:all")
    edit_steps(ws, "import sys\n", "import sys  # a comment, so the file changes\n")
    second = build_json(ws, "//pkg:all")
    assert statuses(second) == {G: "cached", P: "built", AFTER: "cached"}


def test_touching_the_function_file_reruns_nothing(make_workspace):
    ws = workspace(make_workspace)
    build_json(ws, "//pkg:all")
    future = time.time() + 3600
    os.utime(ws / "pkg" / "steps.py", (future, future))
    assert set(statuses(build_json(ws, "//pkg:all")).values()) == {"cached"}


def test_config_is_identity(make_workspace):
    ws = workspace(make_workspace)
    build_json(ws, "//pkg:all")
    set_build(ws, config={"n": 2})
    second = build_json(ws, "//pkg:all")
    assert statuses(second) == {G: "cached", P: "built", AFTER: "built"}
    assert output_text(second, P, "result.txt") == "gee\n" * 2
    set_build(ws, config={"n": 3})
    assert set(statuses(build_json(ws, "//pkg:all")).values()) == {"cached"}


def test_an_exception_fails_the_step_with_its_message_and_traceback(make_workspace):
    ws = workspace(make_workspace, fn="steps.py:explode")
    result = build_json(ws, "-k", "//pkg:all", expect_rc=1)
    assert statuses(result) == {G: "built", P: "failed", AFTER: "skipped"}
    reason = result["by_label"][P]["reason"]
    assert "ValueError" in reason and "bad value n=3" in reason
    key = result["by_label"][P]["key"]
    [record] = attempt_records(ws / "cache", key)
    assert record["status"] == "failed" and "bad value n=3" in record["error"]
    [log] = attempt_logs(ws / "cache", key)
    text = log.read_text()
    assert "Traceback (most recent call last)" in text
    assert "in helper" in text and "in explode" in text and "ValueError: bad value n=3" in text
    assert not (ws / "cache" / "ac" / key[:2] / f"{key}.json").exists()
    assert "bad value n=3" in result["stderr"]


def test_a_worker_that_dies_fails_the_step(make_workspace):
    ws = workspace(make_workspace, fn="steps.py:exit_hard")
    result = build_json(ws, "//pkg:p", expect_rc=1)
    assert statuses(result)[P] == "failed"
    assert "7" in result["by_label"][P]["reason"]


def test_a_missing_function_fails_the_step(make_workspace):
    ws = workspace(make_workspace, fn="steps.py:no_such_function")
    result = build_json(ws, "//pkg:p", expect_rc=1)
    assert statuses(result)[P] == "failed"
    assert "no_such_function" in result["by_label"][P]["reason"]


def test_a_function_in_another_package(make_workspace):
    ws = make_workspace(
        {
            "lib/BUILD.marin": "",
            "lib/steps.py": STEPS,
            "pkg/BUILD.marin": BUILD.format(fn="//lib:steps.py:make", config={"n": 2}),
        }
    )
    first = build_json(ws, "//pkg:all")
    assert output_text(first, P, "result.txt") == "gee\n" * 2
    edit_steps_path = ws / "lib" / "steps.py"
    edit_steps_path.write_text(edit_steps_path.read_text().replace("text * n", "text * n * 2"))
    second = build_json(ws, "//pkg:all")
    assert statuses(second) == {G: "cached", P: "built", AFTER: "built"}
    assert output_text(second, P, "result.txt") == "gee\n" * 4


def test_a_step_may_print(make_workspace):
    """print() in a step function must not break the worker's stdout protocol."""
    ws = workspace(make_workspace, fn="steps.py:noisy")
    result = build_json(ws, "//pkg:p", expect_rc=None)
    assert statuses(result)[P] == "built", result["by_label"][P].get("reason")
    assert output_text(result, P, "result.txt") == "noisy\n"
    [log] = attempt_logs(ws / "cache", result["by_label"][P]["key"])
    assert "a line on stderr from the step" in log.read_text()


def test_threads_a_step_leaves_running_do_not_fail_it(make_workspace):
    """Python's shutdown under a thread inside XLA aborts the process; the worker exits
    without it once the step is done, keeping everything the step wrote and logged."""
    ws = workspace(make_workspace, fn="steps.py:leaves_a_busy_thread")
    result = build_json(ws, "//pkg:p", expect_rc=None)
    assert statuses(result)[P] == "built", result["by_label"][P].get("reason")
    [log] = attempt_logs(ws / "cache", result["by_label"][P]["key"])
    text = log.read_text()
    assert "the last line of the step" in text and "the last log record of the step" in text
