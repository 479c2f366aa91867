"""A workspace of a rule that keeps checkpoints, for the tests of kept states on any store
or executor.
"""

from __future__ import annotations

import json
from pathlib import Path

import blake3
from conftest import run_cli, statuses

RULES = """
import shutil
import time
from pathlib import Path

from marinbuild.targets import Attr, Rule, StepInput, checkpoint_dir, checkpoint_name
from marinbuild.targets import attrs as types
from marinbuild.targets.context import StepFailed


def _count(ctx):
    for step in range(ctx.attrs["steps"]):
        if step in ctx.attrs["keep"]:
            state = ctx.tmp / f"step-{step}"
            state.mkdir()
            (state / "value.txt").write_text(f"{ctx.attrs['start'] + step}\\n")
            if ctx.attrs["announce"]:
                ctx.publish_checkpoint(step, state)
            shutil.copytree(state, ctx.out / checkpoint_dir(step))
    signal, deadline = ctx.attrs["wait_for"], time.monotonic() + 30
    while signal and not Path(signal).exists():
        if time.monotonic() > deadline:
            raise StepFailed(f"no reader wrote {signal} while this step ran")
        time.sleep(0.02)
    if (ctx.workspace / "FAIL").exists():
        raise StepFailed("failing after its kept states, as asked")
    (ctx.out / "final.txt").write_text(f"{ctx.attrs['start'] + ctx.attrs['steps']}\\n")


counter = Rule(
    name="counter",
    impl=_count,
    attrs={
        "steps": Attr(types.INT),
        "keep": Attr(types.JSON, default=[]),
        "start": Attr(types.INT, default=0),
        "wait_for": Attr(types.STRING, default="", identity=False),
        # False: its kept states are only in its output, published from there when it ends.
        "announce": Attr(types.BOOL, default=True, identity=False),
    },
    keeps_checkpoints="keep",
)


def _forget(ctx):  # keeps a state it never publishes, or (stray) leaves what is none under checkpoints/
    (ctx.out / "final.txt").write_text("done\\n")
    if ctx.attrs["stray"]:
        (ctx.out / checkpoint_dir(1)).mkdir(parents=True)
        (ctx.out / checkpoint_dir(1) / "value.txt").write_text("1\\n")
        (ctx.out / "checkpoints" / "notes.txt").write_text("not a state\\n")


forgetful = Rule(
    name="forgetful",
    impl=_forget,
    attrs={"keep": Attr(types.JSON, default=[1]), "stray": Attr(types.BOOL, default=False)},
    keeps_checkpoints="keep",
)


def _read(ctx):
    src, step = ctx.attrs["src"], ctx.attrs["step"]
    root = ctx.root(src if step is None else checkpoint_name(src, step))
    hold, deadline = ctx.attrs["hold"], time.monotonic() + 60
    if hold:  # say it runs, then wait for the test to let it read
        Path(hold + ".running").write_text("")
    while hold and not Path(hold).exists():
        if time.monotonic() > deadline:
            raise StepFailed(f"nobody wrote {hold} while this step ran")
        time.sleep(0.02)
    (ctx.out / "read.txt").write_text((root / ("final.txt" if step is None else "value.txt")).read_text())
    if ctx.attrs["signal"]:
        Path(ctx.attrs["signal"]).write_text("read\\n")


reader = Rule(
    name="reader",
    impl=_read,
    attrs={
        "src": Attr(types.LABEL),
        "step": Attr(types.INT, default=None),
        "signal": Attr(types.STRING, default="", identity=False),
        "hold": Attr(types.STRING, default="", identity=False),
    },
    step_inputs={"src": StepInput("step", "a counter target")},
)
"""


def _build_file(signal: Path, keep: str = "[2]", hold: str = "", steps: int = 5) -> str:
    return f"""
counter(name = "count", steps = {steps}, keep = {keep}, wait_for = "{signal}")
reader(name = "read2", src = ":count", step = 2, signal = "{signal}", hold = "{hold}")
reader(name = "read_all", src = ":count")
"""


def kept_workspace(make_workspace, tmp_path: Path, name: str = "ws", keep: str = "[2]", hold: str = "") -> Path:
    signal = tmp_path / f"{name}-read"
    return make_workspace(
        {"toyrules.py": RULES, "p/BUILD.marin": _build_file(signal, keep, hold)}, 'rules = ["toyrules"]\n', name
    )


def _show(ws: Path, what: str, store: str | None = None) -> dict:
    rc, out, err = run_cli(ws, "show", "--json", what, store=store)
    assert rc == 0, err
    return json.loads(out)


def _files(shown: dict) -> dict[str, str]:
    return {item["path"]: item["blake3"] for item in shown["outputs"]}


def _value(text: str) -> dict[str, str]:
    """The files of a kept state of the counter holding `text`."""
    return {"value.txt": blake3.blake3(text.encode()).hexdigest()}


def _where(ws: Path, *args: str, store: str | None = None) -> tuple[Path, str]:
    rc, out, err = run_cli(ws, "where", *args, store=store)
    assert rc == 0, err
    return Path(out.strip()), err


QUIET = """
counter(name = "quiet", steps = 4, keep = [1, 3], announce = False)
reader(name = "read1", src = ":quiet", step = 1)
"""


def assert_published_when_it_ended(ws: Path, built: dict, store: str | None = None) -> None:
    """What `QUIET` built: its kept states published by the keeper's attempt as it ended,
    from its output, which holds them no more."""
    assert statuses(built) == {"//p:quiet": "built", "//p:read1": "built"}, built["stderr"]
    assert "published its checkpoint" not in built["stderr"]
    quiet = _show(ws, "//p:quiet", store)
    assert set(_files(quiet)) == {"final.txt"}
    for step, value in (("1", "1\n"), ("3", "3\n")):
        state = _show(ws, quiet["checkpoints"][step], store)
        assert _files(state) == _value(value)
        assert state["provenance"]["attempt"] == built["by_label"]["//p:quiet"]["attempt"]
    assert (_where(ws, "//p:read1", store=store)[0] / "read.txt").read_text() == "1\n"
