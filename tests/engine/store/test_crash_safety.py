"""The store is never wrong: not after SIGKILL at any moment, not after files are damaged."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import (
    CLI_TIMEOUT_S,
    ac_entries,
    build_json,
    entry_path,
    entry_problems,
    output_text,
    start_to_kill,
    statuses,
)

# -- 6. SIGKILL at random moments ---------------------------------------------------------------

N_TARGETS = 30
SEQ = "".join(f"{n}\n" for n in range(1, 3001))  # what `seq 1 3000` prints


def _parent(i: int) -> int | None:
    return None if i == 0 else (i - 1) // 2


def crash_build_file() -> str:
    """A binary tree of genrules, each reading seed.txt and its parent, with short sleeps."""
    lines = []
    for i in range(N_TARGETS):
        parent = _parent(i)
        srcs = ["seed.txt"] + ([f":t{parent}"] if parent is not None else [])
        cmd = f"{{ cat $(SRCS); echo {i}; }} > $@; sleep 0.0{i % 7 + 1}; seq 1 3000 >> $@"
        lines.append(f"genrule(name = 't{i}', srcs = {srcs!r}, outs = ['t{i}.txt'], cmd = {cmd!r})")
    return "\n".join(lines) + "\n"


def expected_outputs(seed: str) -> dict[str, str]:
    contents: dict[int, str] = {}
    for i in range(N_TARGETS):
        parent = _parent(i)
        contents[i] = seed + (contents[parent] if parent is not None else "") + f"{i}\n" + SEQ
    return {f"//pkg:t{i}": text for i, text in contents.items()}


def check_store(store: Path) -> int:
    """Every published entry's files exist and match the manifest; returns how many entries."""
    entries = ac_entries(store)
    problems = [problem for entry in entries for problem in entry_problems(store, entry)]
    assert not problems, "\n".join(problems)
    return len(entries)


def _start_build(ws: Path) -> subprocess.Popen:
    return start_to_kill(ws, "build", "--jobs", "2", "//pkg:all")


def test_sigkill_at_random_moments_never_publishes_a_bad_entry(make_workspace):
    ws = make_workspace({"pkg/BUILD.marin": crash_build_file(), "pkg/seed.txt": "calibrate\n"})
    store = ws / "cache"
    rng = random.Random(int(os.environ.get("MARINBUILD_CRASH_SEED", "1234")))

    # One uninterrupted build tells how long a full build takes here.
    started = time.monotonic()
    calibration = build_json(ws, "--jobs", "2", "//pkg:all")
    duration = time.monotonic() - started
    assert set(statuses(calibration).values()) == {"built"}
    check_store(store)

    deadline = time.monotonic() + 40
    trials = killed = 0
    seed = ""
    while trials < 25 and (trials < 20 or time.monotonic() < deadline):
        if trials % 3 == 0:  # a new seed reruns everything; otherwise the build resumes
            seed = f"trial {trials}\n"
            (ws / "pkg" / "seed.txt").write_text(seed)
        process = _start_build(ws)
        time.sleep(rng.uniform(0, duration))
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it finished first: fine
        if process.wait(timeout=CLI_TIMEOUT_S) == -signal.SIGKILL:
            killed += 1
        time.sleep(0.02)  # let the killed group's children be reaped by the kernel
        check_store(store)
        trials += 1
    assert trials >= 20
    assert killed >= trials // 2, f"only {killed} of {trials} builds were killed before they finished"

    # The store left by all those crashes builds to the right answer: first resuming the
    # last trial's seed (whatever it had published is reused), then from a fresh seed.
    for final_seed in (seed, "final\n"):
        (ws / "pkg" / "seed.txt").write_text(final_seed)
        result = build_json(ws, "--jobs", "2", "//pkg:all")
        assert set(statuses(result).values()) <= {"built", "cached"}
        for label, text in expected_outputs(final_seed).items():
            assert output_text(result, label, label.split(":")[1] + ".txt") == text, label
        again = build_json(ws, "--jobs", "2", "//pkg:all")
        assert set(statuses(again).values()) == {"cached"}
    check_store(store)


# -- 7. files damaged by hand -------------------------------------------------------------------

CHAIN = """\
    genrule(name = "src", outs = ["src.txt"], cmd = "echo alpha > $@")
    genrule(name = "mid", srcs = [":src"], outs = ["mid.txt", "sub/mid2.txt"], \
cmd = "cat $< > $(RULEDIR)/mid.txt; echo b2 > $(RULEDIR)/sub/mid2.txt")
    genrule(name = "last", srcs = [":mid"], outs = ["last.txt"], cmd = "cat $(SRCS) > $@; echo c >> $@")
    """
# Names that are not emoji short codes: see test_cli.py for labels like //pkg:b.
A, B, C = "//pkg:src", "//pkg:mid", "//pkg:last"


@pytest.fixture
def built_chain(make_workspace):
    ws = make_workspace({"pkg/BUILD.marin": CHAIN})
    first = build_json(ws, "//pkg:all")
    assert set(statuses(first).values()) == {"built"}
    assert output_text(first, C, "last.txt") == "alpha\nb2\nc\n"
    return ws, first


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "WARNING" in line]


def _age_outputs(first: dict) -> None:
    """Make every output look old, so the stat cache trusts (not re-hashes) it afterwards."""
    old = time.time() - 3600
    for item in first["targets"]:
        for path in Path(item["output"]).rglob("*"):
            if path.is_file():
                os.utime(path, (old, old))


def _same_size_same_mtime(path: Path) -> None:
    stat = path.stat()
    data = path.read_bytes()
    path.write_bytes(data.swapcase())
    assert path.read_bytes() != data and path.stat().st_size == stat.st_size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


DAMAGE = {
    "overwrite": lambda path: path.write_bytes(b"garbage, not what was built\n"),
    "same-size": lambda path: path.write_bytes(b"x" * path.stat().st_size),
    "same-size-same-mtime": _same_size_same_mtime,
    "append": lambda path: path.open("ab").write(b"more"),
    "delete": lambda path: path.unlink(),
}


@pytest.mark.parametrize("trusted", [False, True], ids=["fresh", "stat-cache-trusted"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_output_is_detected_reported_and_rebuilt(built_chain, damage, trusted):
    ws, first = built_chain
    if trusted:
        _age_outputs(first)
        warm = build_json(ws, "//pkg:all")  # records the aged files in the stat cache
        assert set(statuses(warm).values()) == {"cached"} and not _warnings(warm["stderr"])
        warm = build_json(ws, "//pkg:all")
        assert set(statuses(warm).values()) == {"cached"}
    victim = Path(first["by_label"][B]["output"]) / "sub" / "mid2.txt"
    DAMAGE[damage](victim)

    second = build_json(ws, "//pkg:all")
    assert statuses(second) == {A: "cached", B: "built", C: "cached"}  # b is rebuilt to the same bytes
    warnings = _warnings(second["stderr"])
    assert len(warnings) == 1, second["stderr"]
    assert B in warnings[0] and "sub/mid2.txt" in warnings[0]
    assert victim.read_text() == "b2\n"
    assert output_text(second, C, "last.txt") == "alpha\nb2\nc\n"
    assert second["by_label"][B]["key"] == first["by_label"][B]["key"]
    check_store(ws / "cache")

    third = build_json(ws, "//pkg:all")
    assert set(statuses(third).values()) == {"cached"} and not _warnings(third["stderr"])


def test_damaged_dependency_is_rebuilt_and_its_dependents_stay_cached(built_chain):
    ws, first = built_chain
    victim = Path(first["by_label"][A]["output"]) / "src.txt"
    victim.write_text("ALPHA\n")
    second = build_json(ws, "//pkg:all")
    assert statuses(second) == {A: "built", B: "cached", C: "cached"}
    assert any(A in line and "src.txt" in line for line in _warnings(second["stderr"]))
    assert victim.read_text() == "alpha\n"


def test_whole_output_directory_deleted(built_chain):
    ws, first = built_chain
    output = Path(first["by_label"][C]["output"])
    for path in output.iterdir():
        path.unlink()
    output.rmdir()
    second = build_json(ws, "//pkg:all")
    assert statuses(second) == {A: "cached", B: "cached", C: "built"}
    assert any(C in line and "last.txt" in line for line in _warnings(second["stderr"]))
    assert output_text(second, C, "last.txt") == "alpha\nb2\nc\n"


def test_unreadable_entry_is_reported_quarantined_and_rebuilt(built_chain):
    ws, first = built_chain
    store = ws / "cache"
    key = first["by_label"][C]["key"]
    entry = entry_path(store, key)
    entry.write_text('{"format": 1, "key": "trunc')
    second = build_json(ws, "//pkg:all")
    assert statuses(second) == {A: "cached", B: "cached", C: "built"}
    assert any(C in line for line in _warnings(second["stderr"]))
    assert json.loads(entry.read_text())["key"] == key
    assert list((store / "quarantine").glob(f"{key}.*.json")), "the bad entry is kept aside"
    check_store(store)


def test_damaged_output_in_dry_run_is_reported_not_repaired(built_chain):
    ws, first = built_chain
    victim = Path(first["by_label"][C]["output"]) / "last.txt"
    victim.write_text("nope\n")
    dry = build_json(ws, "--dry-run", "//pkg:all")
    assert statuses(dry) == {A: "cached", B: "cached", C: "would-run"}
    assert "corrupt" in dry["by_label"][C]["reason"]
    assert victim.read_text() == "nope\n"
