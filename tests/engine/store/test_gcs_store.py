"""A store on GCS (fake-gcs-server): shared hits, one run per key, never a bad answer."""

from __future__ import annotations

import functools
import json
import os
import random
import re
import signal
import subprocess
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import blake3
import pytest
from conftest import CLI_TIMEOUT_S, build_json, manifest_digests, manifest_sizes, run_cli, start_cli, statuses
from helpers_faults import bucket_problems

from marinbuild import provenance
from marinbuild.errors import OutputDamaged, StoreError
from marinbuild.sizes import human_size
from marinbuild.store import AttemptStatus, StoreSpec, large_download, layout, open_store, reporting_transfers
from marinbuild.store.gcs import GCSStore
from marinbuild.store.lease_object import LeaseSettings, held_lease
from marinbuild.store.local_cache import LocalCache
from marinbuild.store.manifest import hash_tree

TTL_S = 3.0  # short leases: a takeover test waits one expiry


@pytest.fixture(autouse=True)
def short_leases(monkeypatch):
    monkeypatch.setenv("MARINBUILD_LEASE_TTL_S", str(TTL_S))


def gcs_store(bucket: str, tmp_path: Path, prefix: str = "mb") -> GCSStore:
    store = open_store(f"gs://{bucket}/{prefix}", tmp_path / "local")
    assert isinstance(store, GCSStore)
    return store


def attempts_by_key(fs, root: str) -> dict[str, list[dict]]:
    fs.invalidate_cache()
    found: dict[str, list[dict]] = {}
    for path in fs.find(f"{root}/attempts"):
        if path.endswith(".json"):
            record = json.loads(fs.cat_file(path))
            found.setdefault(record["key"], []).append(record)
    return found


# -- the store's primitives ---------------------------------------------------------------------


def test_gcs_primitives_use_generation_preconditions(gcs_bucket, tmp_path):
    store = gcs_store(gcs_bucket, tmp_path)
    assert store.read_bytes("a/b.json") is None and store.signature("a/b.json") is None
    assert store.create_only("a/b.json", b"first")
    assert not store.create_only("a/b.json", b"second"), "a second create must get 412"
    assert store.read_bytes("a/b.json") == b"first"
    data, generation = store.read_versioned("a/b.json")
    newer = store.write_if_generation("a/b.json", b"v2", generation)
    with pytest.raises(FileExistsError):
        store.write_if_generation("a/b.json", b"stale", generation)
    assert store.read_versioned("a/b.json") == (b"v2", newer)
    store.write_bytes("c/d.txt", b"hello")
    assert store.list("") == ["a/b.json", "c/d.txt"]
    staged = tmp_path / "staged"
    (staged / "sub").mkdir(parents=True)
    (staged / "sub" / "x.bin").write_bytes(b"x" * 1000)
    checksums = store.put_dir(staged, "out/xx/k", hash_tree(staged))
    stats = store.stat_tree("out/xx/k")
    assert set(stats) == {"sub/x.bin"} and stats["sub/x.bin"].size == 1000
    assert checksums == {"sub/x.bin": stats["sub/x.bin"].checksum} and checksums["sub/x.bin"].startswith("crc32c:")
    store.delete("out/xx/k")
    assert store.stat_tree("out/xx/k") == {}


def test_transfers_report_bytes_files_and_rate(gcs_bucket, tmp_path):
    store = gcs_store(gcs_bucket, tmp_path)
    staged = tmp_path / "staged"
    staged.mkdir()
    for index in range(3):
        (staged / f"part{index}.bin").write_bytes(os.urandom(2**20))
    manifest = hash_tree(staged)
    seen: list[tuple[float, float | None, str]] = []
    with reporting_transfers(lambda done, total, unit: seen.append((done, total, unit))):
        store.put_dir(staged, "out/xx/k", manifest)
        local = LocalCache(tmp_path / "cache").materialise(store, "out/xx/k", manifest)
    assert (local / "part2.bin").read_bytes() == (staged / "part2.bin").read_bytes()
    uploads = [item for item in seen if "uploaded" in item[2]]
    downloads = [item for item in seen if "downloaded" in item[2]]
    assert uploads[-1][:2] == (3 * 2**20, 3 * 2**20) and "3/3 files" in uploads[-1][2] and "iB/s" in uploads[-1][2]
    assert downloads[-1][:2] == (3 * 2**20, 3 * 2**20) and "3/3 files" in downloads[-1][2]


def test_upload_progress_reads_in_sizes_a_person_reads(make_workspace, gcs_bucket):
    """Not `0/1.04904e-05 MiB uploaded`, as the upload of a file of 11 bytes once read."""
    build = """
        genrule(name = "tiny", outs = ["t.txt"], cmd = "echo greetings > $@")
        genrule(name = "large", outs = ["l.bin"], cmd = "head -c 1572864 /dev/zero > $@")
    """
    ws = make_workspace({"pkg/BUILD.marin": build})
    rc, out, err = run_cli(ws, "build", "//pkg:all", store=f"gs://{gcs_bucket}/mb")
    assert rc == 0, err
    shown = {line.split(": ", 1)[0].strip(): line.split(": ", 1)[1] for line in err.splitlines() if "uploaded" in line}
    size, rate = r"[\d,]+ B|[\d,]+\.\d (KiB|MiB|GiB)", r"[\d,]+ B/s|[\d,]+\.\d (KiB|MiB|GiB)/s"
    assert re.fullmatch(rf"0 B/10 B uploaded \(\d/1 files, ({rate})\)", shown["//pkg:tiny"]), err
    assert re.fullmatch(rf"({size})/1\.5 MiB uploaded \(\d/1 files, ({rate})\)", shown["//pkg:large"]), err


def test_a_lease_excludes_others_and_an_expired_one_is_taken_over(gcs_bucket, tmp_path):
    store = gcs_store(gcs_bucket, tmp_path)
    settings = LeaseSettings(ttl_s=TTL_S)
    events: list[str] = []
    waits: list[str] = []

    def hold(name: str) -> None:
        with held_lease(store, "locks/ab/k.lock", settings, waits.append):
            events.append(f"{name} in")
            time.sleep(0.5)
            events.append(f"{name} out")

    threads = [threading.Thread(target=hold, args=(name,)) for name in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert [event.split()[1] for event in events] == ["in", "out", "in", "out"]
    assert waits and "holds it" in waits[0], waits

    # A holder that stops heartbeating (killed) is taken over once its lease expires, and
    # finds out at its next heartbeat that it lost it.
    lost = threading.Event()
    with held_lease(store, "locks/ab/j.lock", settings, None) as first:
        first.on_lost = lost.set
        data, generation = store.read_versioned("locks/ab/j.lock")
        holder = json.loads(data)
        holder.update(expires=time.time() - 1, token="someone else")
        store.write_if_generation("locks/ab/j.lock", json.dumps(holder).encode(), generation)
        assert lost.wait(TTL_S * 2) and first.lost


# -- acceptance ---------------------------------------------------------------------------------

PIPELINE = """\
    genrule(name = "data", outs = ["data.txt"], cmd = "seq 1 2000 > $@")
    genrule(name = "tokens", srcs = [":data"], outs = ["tokens.txt"], cmd = "tr 0-9 a-j < $< > $@")
    genrule(name = "model", srcs = [":tokens"], outs = ["model/weights.bin", "model/config.json"],
            cmd = "sleep 0.3; sha256sum $< > $(RULEDIR)/model/weights.bin; \
echo '{\\"layers\\": 2}' > $(RULEDIR)/model/config.json")
    """


def test_two_workspaces_share_one_gcs_store(make_workspace, gcs_bucket):
    """A builds; B (its own workspace and local cache) runs nothing and can read the model."""
    store = f"gs://{gcs_bucket}/team"
    a = make_workspace({"exp/BUILD.marin": PIPELINE}, name="alice")
    b = make_workspace({"exp/BUILD.marin": PIPELINE}, name="bob")
    built = build_json(a, "//exp:all", store=store)
    assert set(statuses(built).values()) == {"built"}
    assert built["by_label"]["//exp:model"]["output"].startswith(f"gs://{gcs_bucket}/team/out/")
    shared = build_json(b, "//exp:all", store=store)
    assert set(statuses(shared).values()) == {"cached"}
    rc, out, err = run_cli(b, "where", "//exp:model", store=store)
    assert rc == 0, err
    model = Path(out.strip())
    assert model.is_relative_to(b / ".marinbuild")
    assert json.loads((model / "model" / "config.json").read_text()) == {"layers": 2}


CHAIN = (
    "\n".join(
        f"genrule(name = 's{i}', srcs = {[f':s{i - 1}'] if i else []!r}, outs = ['s{i}.txt'], "
        f"cmd = 'sleep 0.4; {{ cat $(SRCS) /dev/null; echo {i}; }} > $@')"
        for i in range(4)
    )
    + "\ngenrule(name = 'side', outs = ['side.txt'], cmd = 'sleep 0.4; echo side > $@')\n"
)


def _builder(ws: Path, store: str, *args: str) -> subprocess.Popen:
    return start_cli(ws, "build", *args, store=store, own_group=True)


def test_four_concurrent_builders_run_every_action_once(make_workspace, gcs_bucket, fake_gcs_server):
    store = f"gs://{gcs_bucket}/shared"
    workspaces = [make_workspace({"pkg/BUILD.marin": CHAIN}, name=f"builder{n}") for n in range(4)]
    builders = [_builder(ws, store, "--json", "--jobs", "2", "//pkg:all") for ws in workspaces]
    results = []
    for builder in builders:
        out, err = builder.communicate(timeout=CLI_TIMEOUT_S)
        assert builder.returncode == 0, err
        results.append(json.loads(out))
    attempts = attempts_by_key(fake_gcs_server.fs(), f"{gcs_bucket}/shared")
    keys = {item["key"] for item in results[0]["targets"]}
    assert set(attempts) == keys
    for key, records in attempts.items():
        assert [record["status"] for record in records] == ["succeeded"], (key, records)
    outputs = [{item["label"]: item["output"] for item in result["targets"]} for result in results]
    assert all(found == outputs[0] for found in outputs)
    built = sum(item["status"] == "built" for result in results for item in result["targets"])
    assert built == len(keys), "each action is built by exactly one builder, the others get hits"
    assert not bucket_problems(fake_gcs_server.fs(), f"{gcs_bucket}/shared")


RESUMABLE_RULE = """\
    import os
    import time

    from marinbuild.targets.rule import Execution, Rule


    def _count(ctx):
        checkpoint = ctx.scratch / "step"
        start = int(checkpoint.read_text()) if checkpoint.exists() else 0
        with open(ctx.scratch / "starts", "a") as starts:
            starts.write(f"{start}\\n")
        for step in range(start, 60):
            time.sleep(0.1)
            ctx.log.info("finished step %d", step)
            (ctx.scratch / "step.tmp").write_text(str(step + 1))
            os.replace(ctx.scratch / "step.tmp", checkpoint)  # checkpoints are written whole
        (ctx.out / "done.txt").write_text(open(ctx.scratch / "starts").read())


    counter = Rule(name = "counter", impl = _count, attrs = {}, resumable = True, execution = Execution.SUBPROCESS)
    """


def test_sigkilled_lease_holder_is_taken_over_on_another_machine_and_resumed(
    make_workspace, gcs_bucket, tmp_path, monkeypatch
):
    """Two workspaces with their own local caches stand for two machines: B waits for A's
    lease, tails A's log meanwhile, takes over after A is killed and resumes from the
    checkpoint A left in the store."""
    monkeypatch.setenv("MARINBUILD_SYNC_S", "1")
    files = {"pkg/BUILD.marin": "counter(name = 'train')\n", "steprules.py": RESUMABLE_RULE}
    machine_a = make_workspace(files, config='rules = ["steprules"]\n', name="machine_a")
    machine_b = make_workspace(files, config='rules = ["steprules"]\n', name="machine_b")
    store_url = f"gs://{gcs_bucket}/resume"
    store = gcs_store(gcs_bucket, tmp_path, "resume")
    first = _builder(machine_a, store_url, "//pkg:train")
    deadline = time.monotonic() + 30
    while not [path for path in store.list("scratch") if path.endswith("/step")] and time.monotonic() < deadline:
        time.sleep(0.1)
    second = _builder(machine_b, store_url, "--json", "//pkg:train")
    tailed = threading.Event()
    err_lines: list[str] = []

    def read_stderr() -> None:
        for line in second.stderr:
            err_lines.append(line)
            if "| [attempt" in line and "finished step" in line:
                tailed.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    assert tailed.wait(CLI_TIMEOUT_S), "the waiting builder did not tail the holder's log:\n" + "".join(err_lines)
    assert "holds it" in "".join(err_lines)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    out = second.stdout.read()
    second.wait(timeout=CLI_TIMEOUT_S)
    reader.join(timeout=10)
    assert second.returncode == 0, "".join(err_lines)
    assert statuses(json.loads(out)) == {"//pkg:train": "built"}
    assert "resuming from" in "".join(err_lines)
    rc, where, err = run_cli(machine_b, "where", "//pkg:train", store=store_url)
    starts = [int(line) for line in (Path(where.strip()) / "done.txt").read_text().splitlines()]
    assert starts[0] == 0 and len(starts) == 2 and 0 < starts[1] < 60, f"resumed from its checkpoint: {starts}"
    assert store.list("scratch") == [], "a published key's checkpoints are removed from the store"


def test_a_runner_whose_lease_is_taken_stops_its_action_and_does_not_publish(make_workspace, gcs_bucket, tmp_path):
    ws = make_workspace({"pkg/BUILD.marin": "genrule(name = 'slow', outs = ['o.txt'], cmd = 'sleep 30; echo > $@')\n"})
    store_url = f"gs://{gcs_bucket}/taken"
    builder = _builder(ws, store_url, "--json", "//pkg:slow")
    store = gcs_store(gcs_bucket, tmp_path, "taken")
    deadline = time.monotonic() + 20
    while not store.list("locks") and time.monotonic() < deadline:
        time.sleep(0.05)
    (lock,) = store.list("locks")
    data, generation = store.read_versioned(lock)
    store.write_if_generation(
        lock, json.dumps({**json.loads(data), "token": "thief", "user": "thief"}).encode(), generation
    )
    started = time.monotonic()
    out, err = builder.communicate(timeout=CLI_TIMEOUT_S)
    assert time.monotonic() - started < 25, "the action was stopped, not left to end its 30 s sleep"
    assert builder.returncode == 1
    (target,) = json.loads(out)["targets"]
    assert target["status"] == "failed" and "lost the lease" in target["reason"], target
    assert store.list("ac") == []
    # The attempt is on record as stopped for a lost lease, not as a failure of the step.
    [record] = provenance.key_attempts(store, target["key"])
    assert record.status is AttemptStatus.LEASE_LOST and "lost the lease" in record.error


DAMAGEABLE = """\
    genrule(name = "a", outs = ["a.txt", "b.txt"], cmd = "echo alpha > $(RULEDIR)/a.txt; echo beta > $(RULEDIR)/b.txt")
    genrule(name = "c", srcs = [":a"], outs = ["c.txt"], cmd = "cat $(SRCS) > $@")
    """


@pytest.mark.parametrize("damage", ["flip", "delete"])
def test_damaged_stored_output_is_never_served_and_is_rebuilt(make_workspace, gcs_bucket, fake_gcs_server, damage):
    """A look-up trusts a self-verifying entry without listing its outputs (a no-op build
    costs no request per target); the bytes are checked when read: never served damaged,
    the entry quarantined, the output rebuilt by the next build."""
    ws = make_workspace({"pkg/BUILD.marin": DAMAGEABLE})
    store = f"gs://{gcs_bucket}/dmg"
    first = build_json(ws, "//pkg:all", store=store)
    fs = fake_gcs_server.fs()
    target = first["by_label"]["//pkg:a"]["output"].removeprefix("gs://") + "/a.txt"
    if damage == "flip":
        fs.pipe_file(target, b"alphA\n")
    else:
        fs.rm(target)
    problem = "does not match its manifest" if damage == "flip" else "is missing"
    # A teammate's step that reads it (this machine has its own verified copy): fails,
    # saying why; the entry is quarantined.
    teammate = make_workspace(
        {
            "pkg/BUILD.marin": textwrap.dedent(DAMAGEABLE)
            + 'genrule(name = "d", srcs = [":a"], outs = ["d.txt"], cmd = "cat $(SRCS) > $@")\n'
        }
    )
    failed = build_json(teammate, "//pkg:d", store=store, expect_rc=1)
    reason = failed["by_label"]["//pkg:d"]["reason"]
    assert "an input cannot be read" in reason and problem in reason and "quarantined" in reason, reason
    rc, out, err = run_cli(teammate, "cache", "verify", store=store)
    assert rc == 0, out  # the damaged entry is out of the way
    again = build_json(teammate, "//pkg:all", store=store)
    assert statuses(again) == {"//pkg:a": "built", "//pkg:c": "cached", "//pkg:d": "built"}
    assert fs.cat_file(target) == b"alpha\n"
    assert not bucket_problems(fs, f"{gcs_bucket}/dmg")


@pytest.mark.parametrize("damaged", [False, True])
def test_a_large_download_is_hashed_as_it_lands(gcs_bucket, fake_gcs_server, tmp_path, damaged, download_path):
    """Files of many reads of the socket get the digest of their bytes, by either path; a
    byte changed in the middle of one is never taken into the local cache."""
    staged = tmp_path / "staged"
    staged.mkdir()
    rng = random.Random(7)
    for name, size in [("big.bin", 21 * 2**20 + 12345), ("small.bin", 1000)]:
        (staged / name).write_bytes(rng.randbytes(size))
    manifest = hash_tree(staged)
    store = gcs_store(gcs_bucket, tmp_path)
    store.put_dir(staged, "out/big", manifest)
    downloaded = store.get_files(
        {f"out/big/{item.path}": tmp_path / item.path for item in manifest.files},
        sizes=manifest_sizes(manifest, "out/big"),
    )
    assert downloaded == manifest_digests(manifest, tmp_path)
    if damaged:
        data = bytearray((staged / "big.bin").read_bytes())
        data[11 * 2**20] ^= 0x01
        fake_gcs_server.fs().pipe_file(f"{gcs_bucket}/mb/out/big/big.bin", bytes(data))
    cache = LocalCache(tmp_path / "cache")
    if damaged:
        with pytest.raises(OutputDamaged, match="big.bin does not match its manifest"):
            cache.materialise(store, "out/big", manifest)
        big = next(item.digest for item in manifest.files if item.path == "big.bin")
        assert not list((tmp_path / "cache").rglob(f"{big}*"))  # neither a blob nor a download left
    else:
        tree = cache.materialise(store, "out/big", manifest)
        assert (tree / "big.bin").read_bytes() == (staged / "big.bin").read_bytes()


def test_an_object_replaced_by_a_larger_one_is_not_downloaded_whole(
    gcs_bucket, fake_gcs_server, tmp_path, monkeypatch, download_path
):
    """A teammate replaced a 1 KiB output by 64 MiB: the download, by either path, stops
    a read past the manifest's size, and the output is damaged, never taken into the local
    cache. (Which path is chosen by the manifest's size, the size the object should have.)"""
    if download_path == "own connection":
        monkeypatch.setattr(large_download, "OWN_CONNECTION_BYTES", 1024)
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "weights.bin").write_bytes(b"w" * 1024)
    manifest = hash_tree(staged)
    store = gcs_store(gcs_bucket, tmp_path)
    store.put_dir(staged, "out/swap", manifest)
    fake_gcs_server.fs().pipe_file(f"{gcs_bucket}/mb/out/swap/weights.bin", os.urandom(64 * 2**20))
    seen: list[float] = []
    with reporting_transfers(lambda done, total, unit: seen.append(done)):
        with pytest.raises(OutputDamaged, match="weights.bin does not match its manifest"):
            LocalCache(tmp_path / "cache").materialise(store, "out/swap", manifest)
    assert seen and max(seen) < 2 * 2**20, f"{human_size(max(seen))} downloaded of an output of 1 KiB"
    assert not [path for path in (tmp_path / "cache").rglob("*") if path.is_file()]


def _self_signed(directory: Path) -> Path:
    """A certificate and key for 127.0.0.1 (one PEM file), signed by themselves."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = directory / "server.pem"
    pem.write_bytes(
        certificate.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return pem


@pytest.mark.parametrize("trusted", [True, False])
def test_a_large_download_over_tls_checks_the_servers_certificate(tmp_path, monkeypatch, trusted):
    """GCS is reached over HTTPS: a large object's own connection verifies the server's
    certificate against the machine's trusted ones, as aiohttp's does. Trusted, the object
    lands with its digest; untrusted, the download is refused at once (not tried again
    for the retry budget) and the store names itself."""
    import ssl

    body = random.Random(3).randbytes(3 * 2**20 + 5)

    class Objects(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    pem = _self_signed(tmp_path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Objects)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(pem)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"https://127.0.0.1:{server.server_port}")
    if trusted:
        monkeypatch.setenv("SSL_CERT_FILE", str(pem))  # read by the default context
    monkeypatch.setattr(large_download, "_tls", functools.cache(large_download._tls.__wrapped__))
    monkeypatch.setattr(large_download, "OWN_CONNECTION_BYTES", 1 << 20)
    store = open_store(StoreSpec("gs://b/mb", timeout_s=5, retry_budget_s=30), tmp_path / "local")
    files, sizes = {"out/x.bin": tmp_path / "x.bin"}, {"out/x.bin": len(body)}
    try:
        if trusted:
            assert store.get_files(files, sizes=sizes) == {tmp_path / "x.bin": blake3.blake3(body).hexdigest()}
            assert (tmp_path / "x.bin").read_bytes() == body
        else:
            started = time.monotonic()
            with pytest.raises(StoreError, match="gs://b/mb") as refused:
                store.get_files(files, sizes=sizes)
            assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value), refused.value
            assert time.monotonic() - started < 20, "an untrusted server was not tried again for the 30 s budget"
    finally:
        server.shutdown()
        server.server_close()


def test_a_large_download_holds_a_small_part_of_itself_in_memory(gcs_bucket, tmp_path, download_path):
    """Bytes are hashed from memory as they arrive, by either path: a download holds a
    buffer or a few chunks, never the object (here 48 MiB)."""
    import tracemalloc

    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "big.bin").write_bytes(random.Random(5).randbytes(48 * 2**20))
    manifest = hash_tree(staged)
    store = gcs_store(gcs_bucket, tmp_path)
    store.put_dir(staged, "out/large", manifest)
    tracemalloc.start()
    try:
        downloaded = store.get_files(
            {"out/large/big.bin": tmp_path / "big.bin"}, sizes=manifest_sizes(manifest, "out/large")
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert downloaded == {tmp_path / "big.bin": manifest.files[0].digest}
    assert peak < 24 * 2**20, f"{peak / 2**20:.0f} MiB held to download 48 MiB"


def test_downloading_many_files_holds_no_buffer_per_file(gcs_bucket, tmp_path):
    """The files of one download are hashed as they land, each with a digest of its own
    until all have landed: what each holds meanwhile must stay small (a buffer of its own
    per file would make 10,000 files gigabytes)."""
    import tracemalloc

    staged = tmp_path / "staged"
    staged.mkdir()
    for index in range(200):
        (staged / f"f{index:03d}.bin").write_bytes(index.to_bytes(2, "big") * 512)
    manifest = hash_tree(staged)
    store = gcs_store(gcs_bucket, tmp_path)
    store.put_dir(staged, "out/many", manifest)
    files = {f"out/many/{item.path}": tmp_path / "got" / item.path for item in manifest.files}
    tracemalloc.start()
    try:
        downloaded = store.get_files(files, sizes=manifest_sizes(manifest, "out/many"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert downloaded == manifest_digests(manifest, tmp_path / "got")
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MiB held to download 200 files of 1 KiB"


def test_cache_verify_finds_damage_that_no_build_has_read(make_workspace, gcs_bucket, fake_gcs_server):
    ws = make_workspace({"pkg/BUILD.marin": DAMAGEABLE})
    store = f"gs://{gcs_bucket}/verify"
    first = build_json(ws, "//pkg:all", store=store)
    fs = fake_gcs_server.fs()
    fs.pipe_file(first["by_label"]["//pkg:a"]["output"].removeprefix("gs://") + "/a.txt", b"alphA\n")
    teammate = make_workspace({"pkg/BUILD.marin": DAMAGEABLE})  # no local copy of the output
    assert statuses(build_json(teammate, "//pkg:all", store=store)) == {"//pkg:a": "cached", "//pkg:c": "cached"}
    rc, out, err = run_cli(teammate, "cache", "verify", store=store)
    assert rc == 1 and "a.txt does not match its manifest" in out and "quarantined 1 entries" in out, out + err
    assert statuses(build_json(teammate, "//pkg:all", store=store)) == {"//pkg:a": "built", "//pkg:c": "cached"}
    rc, out, err = run_cli(teammate, "where", "//pkg:a", store=store)
    assert rc == 0 and (Path(out.strip()) / "a.txt").read_text() == "alpha\n"


BIG_OUTPUTS = (
    "\n".join(
        f"genrule(name = 'big{i}', outs = ['part' + str(j) + '.bin' for j in range(4)], "
        f"cmd = 'for f in $(OUTS); do head -c 1500000 /dev/urandom > $$f; done')"
        for i in range(3)
    )
    + "\n"
)


def test_killed_uploads_never_leave_an_entry_pointing_at_partial_data(make_workspace, gcs_bucket, fake_gcs_server):
    ws = make_workspace({"pkg/BUILD.marin": BIG_OUTPUTS})
    store = f"gs://{gcs_bucket}/kill"
    root = f"{gcs_bucket}/kill"
    fs = fake_gcs_server.fs()
    rng = random.Random(int(os.environ.get("MARINBUILD_CRASH_SEED", "1234")))
    started = time.monotonic()
    build_json(ws, "//pkg:all", store=store)
    duration = time.monotonic() - started
    killed = trials = 0
    while killed < 20 and trials < 40:  # a build that finished before its kill does not count
        fs.invalidate_cache()
        for path in fs.find(f"{root}/ac"):  # forget the results: every trial uploads again
            fs.rm(path)
        builder = _builder(ws, store, "//pkg:all")
        time.sleep(rng.uniform(0.3, duration))
        os.killpg(builder.pid, signal.SIGKILL)
        killed += builder.wait(timeout=CLI_TIMEOUT_S) == -signal.SIGKILL
        assert not bucket_problems(fs, root), f"trial {trials}"
        trials += 1
    assert killed >= 15, f"only {killed} of {trials} builds were killed before they finished"
    final = build_json(ws, "//pkg:all", store=store)
    assert set(statuses(final).values()) <= {"built", "cached"}
    assert not bucket_problems(fs, root)


def test_a_copied_store_still_hits(make_workspace, gcs_bucket, fake_gcs_server, tmp_path):
    """Keys hold no location: the store copied to another bucket, or to a local directory, hits."""
    ws = make_workspace({"exp/BUILD.marin": PIPELINE})
    build_json(ws, "//exp:all", store=f"gs://{gcs_bucket}/orig")
    fs = fake_gcs_server.fs()
    other = fake_gcs_server.new_bucket()
    fs.copy(f"{gcs_bucket}/orig", f"{other}/copy", recursive=True)
    fs.get(f"{gcs_bucket}/orig", str(tmp_path / "local-copy"), recursive=True)
    for store in (f"gs://{other}/copy", str(tmp_path / "local-copy")):
        fresh = make_workspace({"exp/BUILD.marin": PIPELINE})
        hit = build_json(fresh, "//exp:all", store=store)
        assert set(statuses(hit).values()) == {"cached"}, (store, hit["stderr"])


# -- an unusable store ------------------------------------------------------------------------


class _Forbidden(BaseHTTPRequestHandler):
    def _deny(self) -> None:
        body = json.dumps(
            {"error": {"code": 403, "message": "caller does not have storage.objects.get access"}}
        ).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _deny

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("failure", ["unreachable", "forbidden"])
def test_unusable_store_is_a_clear_error_and_loses_no_local_state(make_workspace, monkeypatch, failure):
    ws = make_workspace({"pkg/BUILD.marin": "genrule(name = 'x', outs = ['x.txt'], cmd = 'echo x > $@')\n"})
    build_json(ws, "//pkg:x")  # local state: a local store, stat and package caches
    before = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    server = None
    if failure == "forbidden":
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Forbidden)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{server.server_port}")
    else:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")  # discard port: nothing listens
    try:
        started = time.monotonic()
        rc, out, err = run_cli(ws, "build", "//pkg:x", store="gs://team-bucket/mb")
    finally:
        if server is not None:
            server.shutdown()
    assert rc == 2, err
    assert "gs://team-bucket/mb" in err and "hint:" in err and "Traceback" not in err
    assert ("unreachable" if failure == "unreachable" else "Forbidden") in err
    assert time.monotonic() - started < 120, "not tried again for the whole retry budget (300 s)"
    # Every local file is still there (the caches may have learnt more), the local store unchanged.
    assert all(path.is_file() for path in before)
    assert all(path.read_bytes() == data for path, data in before.items() if ".marinbuild" not in path.parts)


def test_a_store_without_preconditions_refuses_to_build_unless_told(make_workspace, tmp_path):
    ws = make_workspace({"pkg/BUILD.marin": "genrule(name = 'x', outs = ['x.txt'], cmd = 'echo x > $@')\n"})
    rc, out, err = run_cli(ws, "build", "//pkg:x", store="memory://mb")
    assert rc == 2 and "memory://mb cannot hold leases" in err and "--unsafe-no-locking" in err, err
    rc, out, err = run_cli(ws, "--unsafe-no-locking", "build", "//pkg:x", store="memory://mb")
    assert rc == 0, err
    with pytest.raises(StoreError, match="unsupported store URL"):
        open_store("nosuchscheme://x", tmp_path)


def test_scratch_mirror_uploads_changes_restores_elsewhere_and_mirrors_deletions(gcs_bucket, tmp_path):
    from marinbuild.store.live_sync import RemoteScratch

    store = gcs_store(gcs_bucket, tmp_path, "mirror")
    local = tmp_path / "scratch-a"
    (local / "step-1").mkdir(parents=True)
    (local / "step-1" / "shard").write_bytes(b"weights-1")
    (local / "step-1" / "metadata.json").write_text("{}")
    mirror = RemoteScratch(store, "k" * 64, local)
    mirror.sync()
    prefix = layout.scratch("k" * 64)
    assert sorted(store.stat_tree(prefix)) == ["step-1/metadata.json", "step-1/shard"]
    (local / "step-2").mkdir()
    (local / "step-2" / "shard").write_bytes(b"weights-2")
    for stale in (local / "step-1").iterdir():
        stale.unlink()
    mirror.sync()
    assert sorted(store.stat_tree(prefix)) == ["step-2/shard"]
    elsewhere = RemoteScratch(store, "k" * 64, tmp_path / "scratch-b")
    assert elsewhere.restore() == 1
    assert (tmp_path / "scratch-b" / "step-2" / "shard").read_bytes() == b"weights-2"
    assert RemoteScratch(store, "k" * 64, local).restore() == 0, "a machine's own scratch is kept as it is"
    mirror.discard()
    assert store.stat_tree(prefix) == {}
