"""What a no-op build does — its *work*, never its time (bench/noop.py measures that).

A no-op build of a cached workspace must decide that nothing changed from memos checked by
`stat` alone: it starts no process, reads no BUILD or .star file (the package memo), no
Python source (rule code digests go through the stat cache), no entry or output file (the
entries memo and the stat cache), and writes nothing but its invocation record and event
stream: no memo is rewritten. Each of these is a shortcut whose loss would cost a no-op of
10,000 targets a tenth of a second or more, and which no timing on a shared machine would
reliably catch. The events come from Python's audit hooks (tests/helpers_audit.py).
"""

from __future__ import annotations

import json
import os
import platform
import re
from pathlib import Path

import pytest
from helpers_audit import Traced, backdate, bytecode_env, run_traced, run_untraced

from marinbuild import hashing
from marinbuild.actions.bookkeeping.noop_certificate import NOOP_CERTIFICATE_ENV
from marinbuild.hashing import StatCache, clock_mark, digest_file, settled_below
from marinbuild.memo import Memo

pytestmark = pytest.mark.usefixtures("settled_bytecode")  # else a fresh checkout's first no-op is not certified

# A rule module in a package with a helper, a .star macro, a glob, sources and a chain.
FILES = {
    "myrules/__init__.py": "",
    "myrules/checks.py": """\
        def check(attrs):
            if attrs["text"] == "forbidden":
                raise ValueError("text may not be 'forbidden'")
        """,
    "myrules/defs.py": """\
        from marinbuild.targets import attrs as types
        from marinbuild.targets.attrs import Attr
        from marinbuild.targets.rule import Rule
        from myrules.checks import check


        def _write(ctx):
            (ctx.out / "text.txt").write_text(ctx.attrs["text"])


        write_text = Rule(name="write_text", impl=_write, attrs={"text": Attr(types.STRING)}, validate=check)
        """,
    "p/BUILD.marin": """\
        load(":macros.star", "counted")
        write_text(name = "hello", text = "hi")
        counted("n", ":hello")
        genrule(name = "all", srcs = glob(["*.txt"]), outs = ["all.txt"], cmd = "cat $(SRCS) > $@")
        """,
    "p/macros.star": """\
        def counted(name, src):
            genrule(name = name, srcs = [src], outs = [name + ".txt"], cmd = "wc -c < $(SRCS) > $@")
        """,
    "p/a.txt": "a\n",
    "q/BUILD.marin": 'genrule(name = "q", srcs = ["//p:n"], outs = ["q.txt"], cmd = "cat $(SRCS) > $@")\n',
}
CONFIG = 'rules = ["myrules.defs"]\n'
LABELS = {"//p:hello", "//p:n", "//p:all", "//q:q"}
# The full check: these tests hold its work (a certified no-op does less: the last test).
FULL = {**bytecode_env(), NOOP_CERTIFICATE_ENV: "0"}


@pytest.fixture
def cached(make_workspace) -> Path:
    """A workspace built, backdated (every digest then trusted) and built again: cached."""
    ws = make_workspace(FILES, config=CONFIG)
    run_untraced(ws, "build", "//...", env=FULL)
    backdate(ws)
    run_untraced(ws, "build", "//...", env=FULL)
    return ws


def noop(ws: Path, env: dict[str, str] = FULL) -> Traced:
    traced = run_traced(ws, "build", "--json", "//...", env=env)
    assert traced.rc == 0, traced.stderr
    assert {item["label"]: item["status"] for item in json.loads(traced.stdout)["targets"]} == dict.fromkeys(
        LABELS, "cached"
    )
    return traced


def in_workspace(ws: Path, paths: list[str]) -> list[str]:
    """The paths inside `ws`, relative to it, in the order they came."""
    root = str(ws.resolve()) + "/"
    return [path.removeprefix(root) for path in paths if path.startswith(root)]


def test_a_noop_starts_no_process(cached):
    """Not git (the workspace is in no repository: nothing is asked), not `uname -p`
    (which platform.platform() starts), not an accelerator probe."""
    assert noop(cached).processes == []


def test_a_noop_reads_only_its_settings_memos_and_salt(cached):
    traced = noop(cached)
    read = in_workspace(cached, traced.paths("read"))
    assert sorted(path for path in read if "/__pycache__/" not in path) == [
        ".marinbuild/entries.pickle",
        ".marinbuild/packages.pickle",
        ".marinbuild/stat-cache.pickle",
        "cache/store.json",
        "marinbuild.toml",
    ]
    # Nor any Python source anywhere: modules come from their bytecode, and the digests of
    # rule code (the package memo's fingerprint, each entry's rule_code) from the stat cache.
    assert [path for path in traced.paths("read") if path.endswith(".py")] == []


def test_a_noop_writes_only_its_invocation_record_and_event_stream(cached):
    traced = noop(cached)
    renamed = in_workspace(cached, traced.paths("rename"))
    record = next(path for path in renamed if path.endswith(".json"))
    invocation = record.removeprefix("cache/invocations/").removesuffix(".json")
    # Written when the build starts and again when it ends, each atomically (a temporary
    # file renamed); no memo is rewritten: nothing in them changed.
    assert renamed == [record, record, f"cache/invocations/{invocation}.events.jsonl"]
    written = in_workspace(cached, traced.paths("write"))
    assert len(written) == 3 and all(path.startswith(f"cache/invocations/.{invocation}.") for path in written)


def test_the_invocation_record_lists_what_json_printed(cached):
    traced = noop(cached)
    record = next(path for path in traced.paths("rename") if path.endswith(".json"))
    targets = json.loads(Path(record).read_text())["targets"]
    assert targets == json.loads(traced.stdout)["targets"]
    order = [item["label"] for item in targets]
    assert sorted(order) == sorted(LABELS)
    assert order.index("//p:hello") < order.index("//p:n") < order.index("//q:q")  # dependencies first


def test_a_certified_noop_reads_its_certificate_and_writes_its_records(cached):
    """Certified (actions/bookkeeping/noop_certificate.py), a no-op reads its settings and its
    certificate only — no memo, no entry, not the store's salt — and writes what the full
    path writes: its invocation record, twice, and its event stream."""
    noop(cached, bytecode_env())  # the full path, which certifies the no-op (run as `noop` runs it)
    traced = noop(cached, bytecode_env())
    read = in_workspace(cached, traced.paths("read"))
    certificate = next(path for path in read if path.startswith(".marinbuild/noop/"))
    assert sorted(path for path in read if "/__pycache__/" not in path) == [certificate, "marinbuild.toml"]
    renamed = in_workspace(cached, traced.paths("rename"))
    record = next(path for path in renamed if path.endswith(".json"))
    assert json.loads((cached / record).read_text())["noop_certificate"] is True
    assert renamed == [record, record, record.removesuffix(".json") + ".events.jsonl"]
    assert traced.processes == []


def test_the_first_noop_after_a_build_reads_no_entry_the_build_wrote(make_workspace):
    """A build remembers each entry it writes as read (`ActionCache._commit`): the no-op
    right after it, which no certificate answers, reads none of them back (at 100,000
    targets, 100,000 reads, parses and recipe hashes: docs/benchmarks.md)."""
    ws = make_workspace(FILES, config=CONFIG)
    run_untraced(ws, "build", "//...", env=FULL)
    read = in_workspace(ws, noop(ws).paths("read"))
    assert ".marinbuild/entries.pickle" in read
    assert [path for path in read if path.startswith("cache/ac/")] == []


# A step that writes its file, then lingers past any file system's clock tick (a jiffy, 10 ms
# at most): its file is older than the clock mark made before its outputs are hashed.
LINGERING = {
    "slow/__init__.py": "",
    "slow/defs.py": """\
        import time

        from marinbuild.targets import attrs as types
        from marinbuild.targets.attrs import Attr
        from marinbuild.targets.rule import Rule


        def _write(ctx):
            (ctx.out / "text.txt").write_text(ctx.attrs["text"])
            time.sleep(0.05)


        write_text = Rule(name="write_text", impl=_write, attrs={"text": Attr(types.STRING)})
        """,
    "p/BUILD.marin": 'write_text(name = "a", text = "a")\nwrite_text(name = "b", text = "b")\n',
}


def test_the_first_noop_after_a_build_hashes_no_output_written_before_its_clock_mark(make_workspace):
    """Outputs hashed after a clock mark (hashing.clock_mark) that is newer than their
    mtime are trusted by the no-op right after the build: it opens none of them (at 100,000
    targets, 100,000 re-hashes: docs/benchmarks.md). A digest recorded without a mark, or
    of a file modified after it, is re-hashed until the racy window has passed (the
    StatCache test below)."""
    ws = make_workspace(LINGERING, config='rules = ["slow.defs"]\n')
    built = run_untraced(ws, "build", "//...", env=FULL)
    assert built.returncode == 0, built.stderr
    traced = run_traced(ws, "build", "--json", "//...", env=FULL)
    assert traced.rc == 0, traced.stderr
    assert {item["status"] for item in json.loads(traced.stdout)["targets"]} == {"cached"}
    read = in_workspace(ws, traced.paths("read"))
    assert [path for path in read if path.startswith("cache/out/")] == []
    assert [path for path in in_workspace(ws, traced.paths("list")) if path.startswith("cache/out/")] == []


def _multigrain_timestamps(directory: Path) -> bool:
    """Whether the kernel stamps files in `directory` finely when it must to tell two changes
    apart (multigrain timestamps: Linux 6.13 and later, on ext4, XFS, btrfs and tmpfs)."""
    release = tuple(int(part) for part in re.findall(r"\d+", platform.release())[:2])
    mounts = [line.split()[1:3] for line in Path("/proc/self/mounts").read_text().splitlines()]
    here = str(directory.resolve())
    _, kind = max((point, kind) for point, kind in mounts if here == point or here.startswith(point.rstrip("/") + "/"))
    return platform.system() == "Linux" and release >= (6, 13) and kind in {"ext4", "xfs", "btrfs", "tmpfs"}


# The same step, which ends as soon as it has written its file.
QUICK = {**LINGERING, "slow/defs.py": LINGERING["slow/defs.py"].replace("time.sleep(0.05)", "pass")}


def test_the_first_noop_after_a_build_neither_hashes_nor_lists_outputs_of_the_steps_last_tick(make_workspace, tmp_path):
    """A step's outputs written in the very clock tick its run ended in are older than the
    clock mark too, where the file system stamps the mark finely (`clock_mark`): the no-op
    right after the build opens no output file and lists no output directory (at 100,000
    targets, half of them were hashed again, and all listed: docs/benchmarks.md)."""
    if not _multigrain_timestamps(tmp_path):
        pytest.skip("the kernel stamps this file system's files with its coarse clock only (no multigrain timestamps)")
    ws = make_workspace(QUICK, config='rules = ["slow.defs"]\n')
    assert run_untraced(ws, "build", "//...", env=FULL).returncode == 0
    traced = run_traced(ws, "build", "--json", "//...", env=FULL)
    assert traced.rc == 0, traced.stderr
    assert {item["status"] for item in json.loads(traced.stdout)["targets"]} == {"cached"}
    touched = in_workspace(ws, traced.paths("read") + traced.paths("list"))
    assert [path for path in touched if path.startswith("cache/out/")] == []


def test_an_output_changed_right_after_its_build_is_caught_by_the_next(make_workspace):
    """What a mark trusts, nothing changed after it: a file rewritten to other bytes of the
    same size, or one added, moments after the build published them (in the same clock
    tick, maybe) is newer than the mark, so the next build hashes or lists it again and
    rebuilds the target rather than serving bytes that are not its manifest's."""
    ws = make_workspace(QUICK, config='rules = ["slow.defs"]\n')
    run_untraced(ws, "build", "//p:a", "//p:b", env=FULL)
    output_of = {label: Path(run_untraced(ws, "where", label, env=FULL).stdout.strip()) for label in ("//p:a", "//p:b")}
    altered, planted = output_of["//p:a"] / "text.txt", output_of["//p:b"] / "planted.sh"
    altered.chmod(0o644)
    altered.write_text("A")  # the same size as "a"
    planted.write_text("x")
    again = run_untraced(ws, "build", "--json", "//...", env=FULL)
    statuses = {item["label"]: item["status"] for item in json.loads(again.stdout)["targets"]}
    assert statuses == {"//p:a": "built", "//p:b": "built"}, again.stderr
    assert "text.txt does not match its manifest" in again.stderr
    assert "planted.sh is not in the manifest" in again.stderr


def test_a_digest_is_trusted_before_the_racy_window_only_for_a_file_older_than_its_mark(tmp_path, monkeypatch):
    """`StatCache.record` with a mark: the file modified before the mark is trusted at
    once; one modified at or after it (the same clock tick as the hash, maybe) is hashed
    again, as any digest recorded within the racy window is."""
    older, newer = tmp_path / "older.txt", tmp_path / "newer.txt"
    older.write_text("older")
    mark = tmp_path / "hashing.mark"
    clock_mark(mark)
    newer.write_text("newer")
    mark_ns = settled_below(mark)
    assert mark_ns is not None
    os.utime(older, ns=(mark_ns - 1, mark_ns - 1))
    os.utime(newer, ns=(mark_ns, mark_ns))
    cache = StatCache(Memo(tmp_path / "stat.pickle", "test"))
    for path in (older, newer):
        cache.record(path, digest_file(path), mark_ns=mark_ns)
    hashed: list[str] = []
    monkeypatch.setattr(hashing, "digest_file", lambda path: hashed.append(Path(path).name) or digest_file(path))
    assert cache.digest(older)[0] == digest_file(older) and cache.digest(newer)[0] == digest_file(newer)
    assert hashed == ["newer.txt"]


def test_a_listing_is_trusted_before_the_racy_window_only_for_directories_older_than_its_mark(tmp_path):
    """`StatCache.record_listing` with a mark, as a publish records the tree it hashed: the
    tree is not listed again while every directory is unchanged and older than the mark; a
    directory at the mark (an entry added in the tick the mark was made, maybe after the
    listing) is listed again, as is any listing recorded within the racy window unmarked."""
    tree = tmp_path / "out"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "a.txt").write_text("a")
    mark = tmp_path / "hashing.mark"
    clock_mark(mark)
    mark_ns = settled_below(mark)
    assert mark_ns is not None
    directories = ["", "sub/"]
    cache = StatCache(Memo(None, "test"))
    for directory in (tree, tree / "sub"):
        os.utime(directory, ns=(mark_ns - 1, mark_ns - 1))
    cache.record_listing(str(tree), directories, mark_ns)
    assert cache.listing_unchanged(str(tree))
    os.utime(tree / "sub", ns=(mark_ns, mark_ns))
    cache.record_listing(str(tree), directories, mark_ns)
    assert not cache.listing_unchanged(str(tree))
    os.utime(tree / "sub", ns=(mark_ns - 1, mark_ns - 1))
    cache.record_listing(str(tree), directories)
    assert not cache.listing_unchanged(str(tree))
