"""A training's estimated cost through a real build (issue: plans that say what they cost).

A toy rule stands for train_lm: `toy_train` declares its FLOPs (`steps` × 1e18) and its
target asks for 8 H100s; it runs on this CPU-only machine with `--allow-cpu`, in a fraction
of a second. 10 steps: 1e19 FLOPs, over 8 chips of 989 TFLOP/s at the default 40%
utilisation, 7.02 accelerator-hours. The build records that estimate with the attempt;
`show` and the report's step page set it beside the time measured; `--max-accelerator-hours`
lets a build under it run and stops one over it before anything runs; the workspace's
`utilisation` setting changes the estimate, and a bad one is bad input naming its file.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

import pytest
from conftest import attempt_records, build_json, cli_env, run_cli, statuses
from helpers_workspace import error_line, store_is_untouched

from marinbuild.report.blocks import duration
from marinbuild.targets.compute import hours_text

RULES = '''
from marinbuild.targets import Attr, Rule
from marinbuild.targets import attrs as types


def _train(ctx):
    (ctx.out / "done.txt").write_text(str(ctx.attrs["steps"]))


def _flops(attrs, _lookup):
    """1e18 FLOPs a step: the toy's stand-in for steps × batch × sequence × FLOPs per token."""
    return attrs["steps"] * 1e18


toy_train = Rule(name="toy_train", impl=_train, attrs={"steps": Attr(types.INT)}, flops=_flops)
'''

BUILD = """
toy_train(name = "run", steps = 10, resources = {"accelerator": "H100", "accelerator_count": 8})
genrule(name = "notes", outs = ["n.txt"], cmd = "echo n > $@")
"""

FLOPS = 10 * 1e18
H100 = 989e12  # dense bf16 FLOP/s a chip


def _hours(utilisation: float) -> float:
    """The accelerator-hours (chip-hours) of :run at `utilisation`, by hand."""
    return FLOPS / (H100 * utilisation) / 3600


def _beside(described: str, hours: float, took_s: float) -> str:
    """The estimate beside a run of `took_s` seconds on the 8 chips, by hand, and the
    utilisation that time implies."""
    took = took_s / 3600 * 8  # the chip-hours it measured
    return (
        f"{described}; took {hours_text(took)} accelerator-hours ({hours_text(took_s / 3600)} h), "
        f"as if at {0.4 * hours / took:.1%} utilisation"
    )


def _workspace(make_workspace, config: str = "") -> Path:
    return make_workspace({"toytrain.py": RULES, "p/BUILD.marin": BUILD}, 'rules = ["toytrain"]\n' + config)


def _cli(ws: Path, *args: str) -> tuple[int, str, str]:
    """The CLI on a machine without accelerators, whatever this one has."""
    return run_cli(ws, *args, env={**cli_env(), "MARINBUILD_ACCELERATORS": "none"})


def _estimate_line(ws: Path, *args: str) -> str:
    """The estimate a dry run prints under //p:run."""
    rc, out, err = _cli(ws, "build", "--dry-run", *args, "//p:run")
    assert rc == 0, err
    lines = out.splitlines()
    status = next(number for number, line in enumerate(lines) if line.split()[1:2] == ["//p:run"])
    return lines[status + 1].strip()


def test_show_and_the_report_set_the_estimate_beside_the_measured_time(make_workspace, tmp_path: Path) -> None:
    ws = _workspace(make_workspace)
    hours = _hours(0.4)
    assert hours_text(hours) == "7.02"
    described = "1e+19 FLOPs on 8 H100 chips at 40% utilisation: 7.02 accelerator-hours (0.878 h)"
    assert _estimate_line(ws) == f"estimate: {described}"

    rc, out, err = _cli(ws, "build", "--json", "--allow-cpu", "//p:all")
    assert rc == 0, err
    assert set(statuses(json.loads(out)).values()) == {"built"}

    rc, out, err = _cli(ws, "show", "--json", "//p:run")
    assert rc == 0, err
    shown = json.loads(out)
    assert shown["estimate"] == {
        "flops": FLOPS,
        "accelerator_hours": pytest.approx(hours, rel=1e-12),
        "accelerator": "H100",
        "chips": 8,
        "utilisation": 0.4,
    }
    took_s = shown["provenance"]["duration_s"]
    assert took_s > 0
    rc, out, err = _cli(ws, "show", "//p:run")
    assert rc == 0, err
    assert f"    duration_s: {took_s}" in out.splitlines(), out
    assert f"  estimate     {_beside(described, hours, took_s)}" in out.splitlines(), out
    # A step that trains nothing has no estimate.
    rc, out, err = _cli(ws, "show", "//p:notes")
    assert rc == 0 and "estimate" not in out, out

    rc, out, err = _cli(ws, "report", "//p:all", "-o", str(tmp_path / "report"))
    assert rc == 0, err
    page = next((tmp_path / "report" / "steps").glob("p_run-*.html")).read_text()
    # The attempt's own duration (the entry's is rounded to the millisecond).
    (attempt,) = attempt_records(ws / "cache", shown["key"])
    assert attempt["duration_s"] == pytest.approx(took_s, abs=5e-4)
    row = f"<tr><th>estimate</th><td>{escape(_beside(described, hours, attempt['duration_s']))}</td></tr>"
    assert f"<tr><th>duration</th><td>{duration(attempt['duration_s'])}</td></tr>{row}" in page, page
    notes = next((tmp_path / "report" / "steps").glob("p_notes-*.html")).read_text()
    assert "<th>estimate</th>" not in notes


def test_a_real_build_under_the_cap_runs_and_one_over_it_is_refused(make_workspace) -> None:
    ws = _workspace(make_workspace)
    # 7.02 accelerator-hours: over a cap of 7, nothing runs, not even the step that trains nothing.
    rc, out, err = _cli(ws, "build", "--allow-cpu", "--max-accelerator-hours", "7", "//p:all")
    assert rc == 2, err
    assert "an estimated 7.02 accelerator-hours, more than --max-accelerator-hours 7; the largest: //p:run: " in (
        error_line(err)
    )
    assert out == "" and store_is_untouched(ws)
    # Under a cap of 8 it runs, and records what it assumed.
    data = build_json(ws, "--allow-cpu", "--max-accelerator-hours", "8", "//p:all")
    assert statuses(data) == {"//p:run": "built", "//p:notes": "built"}
    rc, out, err = _cli(ws, "show", "--json", "//p:run")
    assert rc == 0 and json.loads(out)["estimate"]["accelerator_hours"] == pytest.approx(_hours(0.4)), err
    # Built, it costs nothing: a cap of 0 stops no build that would not spend.
    data = build_json(ws, "--max-accelerator-hours", "0", "//p:all")
    assert statuses(data) == {"//p:run": "cached", "//p:notes": "cached"}
    # A cap past the estimate at the utilisation given on the command line lets it through.
    rc, out, err = _cli(ws, "build", "--dry-run", "--utilisation", "0.5", "--max-accelerator-hours", "6", "//p:run")
    assert rc == 0, err


def test_the_workspace_s_utilisation_setting_changes_the_estimate(make_workspace) -> None:
    ws = _workspace(make_workspace, "utilisation = 0.8\n")
    described = f"1e+19 FLOPs on 8 H100 chips at 80% utilisation: {hours_text(_hours(0.8))} accelerator-hours"
    assert _estimate_line(ws).startswith(f"estimate: {described} ("), _estimate_line(ws)
    # The command line's utilisation wins over the workspace's.
    assert _estimate_line(ws, "--utilisation", "0.4").startswith("estimate: 1e+19 FLOPs on 8 H100 chips at 40% ")
    # A table by kind: H100s at 50%.
    (ws / "marinbuild.toml").write_text('rules = ["toytrain"]\nutilisation = { H100 = 0.5, v5p = 0.6 }\n')
    assert f"at 50% utilisation: {hours_text(_hours(0.5))} accelerator-hours" in _estimate_line(ws)
    # The build records the workspace's, which show gives.
    rc, out, err = _cli(ws, "build", "--allow-cpu", "//p:run")
    assert rc == 0, err
    rc, out, err = _cli(ws, "show", "--json", "//p:run")
    assert rc == 0, err
    shown = json.loads(out)
    assert shown["estimate"]["utilisation"] == 0.5
    # So does a run that is no `build`: `rerun --check` runs it again aside, as an attempt.
    rc, out, err = _cli(ws, "rerun", "--check", shown["key"])
    assert rc == 0, err
    attempts = attempt_records(ws / "cache", shown["key"])
    assert [attempt["estimate"]["utilisation"] for attempt in attempts] == [0.5, 0.5]


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("utilisation = 1.5", "'utilisation': a utilisation is a fraction in (0, 1], got 1.5"),
        ('utilisation = "high"', "'utilisation': a utilisation is a fraction in (0, 1], got 'high'"),
        ("utilisation = { TPU9 = 0.5 }", "'utilisation': unknown accelerator kind 'TPU9'"),
    ],
)
def test_a_bad_utilisation_setting_is_bad_input_naming_the_file(make_workspace, setting: str, message: str) -> None:
    ws = _workspace(make_workspace, setting + "\n")
    rc, out, err = _cli(ws, "build", "--dry-run", "//p:run")
    assert rc == 2, err
    line = error_line(err)
    assert line.startswith(f"marinbuild: error: {ws / 'marinbuild.toml'}: {message}"), line
    assert "Traceback" not in err and out == "" and store_is_untouched(ws)
