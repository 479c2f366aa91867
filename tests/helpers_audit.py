"""The CLI run in a subprocess whose audit hook (PEP 578) records what it does: the files
it opens and whether to write, the directories it lists, the files it renames, the
processes it starts.

Tests of a no-op build's *work* assert on these, never on its time: an audit event is
raised by the interpreter itself for every `open()`, `os.open()`, `os.rename()` and
`subprocess.Popen`, so a shortcut that stops working (a memo not hit, a digest read
instead of a `stat`) shows as an event, on any machine, however fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from conftest import cli_command, cli_env, write_files

from marinbuild.hashing import RACY_NS

# Run as `python -c`: install the hook, run `python -m marinbuild ARGS`, write the events.
_TRACED = r"""
import json, os, runpy, sys
events, _WRITES = [], os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PROCESSES = ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.fork", "os.forkpty", "os.system", "os.spawn")

def hook(event, args):
    if event == "open" and not isinstance(args[0], int):
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & _WRITES)
        events.append(["write" if writes else "read", os.fsdecode(path)])
    elif event in ("os.scandir", "os.listdir") and isinstance(args[0], (str, bytes)):
        events.append(["list", os.fsdecode(args[0])])
    elif event == "os.rename":
        events.append(["rename", os.fsdecode(args[0]), os.fsdecode(args[1])])
    elif event in _PROCESSES:
        events.append(["process", event, repr(args)[:300]])

out, sys.argv = sys.argv[1], ["marinbuild", *sys.argv[2:]]
sys.addaudithook(hook)
try:
    runpy.run_module("marinbuild", run_name="__main__", alter_sys=True)
finally:
    recorded = list(events)
    with open(out, "w") as file:
        json.dump(recorded, file)
"""


@dataclass
class Traced:
    rc: int
    stdout: str
    stderr: str
    events: list[list[str]]

    def paths(self, kind: str) -> list[str]:
        """The paths of the events of `kind` ("read", "write", "list": a directory listed;
        "rename": the destinations)."""
        return [event[-1] for event in self.events if event[0] == kind]

    @property
    def processes(self) -> list[list[str]]:
        return [event for event in self.events if event[0] == "process"]


def bytecode_env() -> dict[str, str]:
    """The tests' environment with Python's bytecode cache written and read: a module
    imported then is read from its `.pyc`, so a `.py` file opened is one marinbuild read."""
    env = cli_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    return env


def run_traced(ws: Path, *args: str, env: dict[str, str] | None = None) -> Traced:
    """`python -m marinbuild --workspace ws ARGS` with its audit events recorded."""
    events_file = ws.parent / f".audit-{os.getpid()}-{time.monotonic_ns()}.json"
    command = [sys.executable, "-c", _TRACED, str(events_file), *cli_command(ws, *args)[3:]]
    done = subprocess.run(command, cwd=ws, capture_output=True, text=True, timeout=120, env=env or bytecode_env())
    events = json.loads(events_file.read_text())
    events_file.unlink()
    return Traced(done.returncode, done.stdout, done.stderr, events)


def run_untraced(ws: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in the same environment as `run_traced`, not traced (a cold build, a warm-up)."""
    done = subprocess.run(
        cli_command(ws, *args), cwd=ws, capture_output=True, text=True, timeout=120, env=env or bytecode_env()
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


# A workspace whose build imports what the no-op tests' builds import: a rule module of its
# own, a genrule, and an external input that is pinned.
_SETTLING_FILES = {
    "myrules/__init__.py": "",
    "myrules/defs.py": (
        "from marinbuild.targets import attrs as types\n"
        "from marinbuild.targets.attrs import Attr\n"
        "from marinbuild.targets.rule import Rule\n"
        "write_text = Rule(name='write_text', impl=lambda ctx: None, attrs={'text': Attr(types.STRING)})\n"
    ),
    "p/BUILD.marin": (
        'write_text(name = "hello", text = "hi")\n'
        'genrule(name = "all", srcs = glob(["*.txt"]), outs = ["all.txt"], cmd = "cat $(SRCS) > $@")\n'
    ),
    "p/a.txt": "a\n",
}


def settle_bytecode(root: Path) -> None:
    """Write Python's bytecode cache for what a build imports, then wait out the racy window.

    A process with the bytecode cache on writes `__pycache__/` into each package it imports
    from that has none yet (a fresh checkout or virtual environment): the package's directory
    is modified. importlib lists the directories it imports from, so a build started within
    2 s of that consults a directory modified in its racy window and rightly certifies no
    no-op. marinbuild's own modules are compiled whole (a test's build may import one the
    warm-up did not); the warm-up writes what it imports of the libraries. Run once per
    test process, before tests that expect one certified."""
    import marinbuild

    env = bytecode_env()
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", os.path.dirname(marinbuild.__file__)], check=True, env=env
    )
    data = root / "data"
    data.mkdir()
    (data / "a.jsonl").write_text("{}\n")
    ws = root / "ws"
    write_files(
        ws,
        {
            **_SETTLING_FILES,
            "q/BUILD.marin": f'external(name = "data", url = "{data}")\n',
            "marinbuild.toml": 'rules = ["myrules.defs"]\n',
        },
    )
    run_untraced(ws, "pin", "//q:data", env=env)
    run_untraced(ws, "build", "//...", env=env)
    time.sleep(RACY_NS / 1e9 + 0.1)  # the stat cache's racy window, and a margin


def backdate(root: Path, seconds: float = 3600) -> None:
    """Set every file's and directory's modification time under `root` back by `seconds`.

    The stat cache does not trust a digest recorded within 2 s of a file's modification
    (marinbuild/hashing.py), so a no-op right after files were written hashes them again;
    backdated, the next build records digests it trusts from then on, with no sleep."""
    when = time.time() - seconds
    for directory, subdirectories, files in os.walk(root):
        for name in [*files, *subdirectories]:
            os.utime(Path(directory, name), (when, when), follow_symlinks=False)
    os.utime(root, (when, when))
