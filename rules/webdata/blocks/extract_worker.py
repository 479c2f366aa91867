"""One input file extracted in forked children, each record within a budget of CPU time.

Resiliparse parses and extracts in C, where neither a Python signal handler nor a thread
can stop it: a page built to be slow (100,000 nested <div>s: 190 s) would hold a step for
as long as it likes. So `extract_text`'s unit forks a child (`os.fork` of the unit's own
process, Resiliparse already imported: a few milliseconds of CPU a file, where a new
interpreter cost 0.1 s) that extracts the file's records and writes each document straight
into the output of its split. The child arms a CPU timer (`ITIMER_PROF`) before each
record's extraction and disarms it after: past the budget, the kernel sends SIGPROF, whose
default action ends the child wherever it is. Before the next record's timer starts, the
child has written the record's document and a line of the ledger through to the kernel, so
a child the timer ends has lost nothing it made, and the ledger says where it died: on the
record after the last it holds, which the parent counts as `over time budget` (where it
was first met, with its URL) before forking a new child from there. Only a record's own
work is timed: not passing over the records a child before it reported. CPU time, not
wall-clock time: a record's budget does not shrink on a busy machine.

The ledger, a file the children append to and the parent reads as they go: a JSON value a
line, a document's split (`"train"`), a skip's `[reason, where]`, or, last, `{"error":
message}` from a child that failed.

A forked child runs extraction and writes files, nothing else, and ends by `os._exit`: it
never returns into the parent's code, flushes none of its buffers or runs its exit
handlers. The unit's process is single-threaded when it forks (`marinbuild.actions.worker`
runs the step in its main thread and starts no other), so no lock is held by a thread the
child lacks.
"""

from __future__ import annotations

import json
import os
import select
import signal
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO, NoReturn

from marinbuild.targets.context import StepFailed, die_with_parent
from rules.webdata.blocks.documents import Document, Skips
from rules.webdata.blocks.extract import OVER_BUDGET, ExtractConfig, Outcome, html_outcome, warc_outcomes

_PROGRESS_SECONDS = 1.0  # between the parent's reports of the documents written


def budgeted_extraction(
    path: Path,
    fmt: str,
    name: str,
    config: ExtractConfig,
    outputs: Mapping[str, BinaryIO],
    split: Callable[[Document], str],
    progress: Callable[[int], None],
) -> tuple[Counter[str], Skips]:
    """Extract the file's records (`fmt`: `warc` or `html`) in order, each record's extraction
    bounded by `config.max_record_seconds` of CPU time, each document a JSON line appended to
    `outputs[split(document)]` (unbuffered files). Returns the documents written by split,
    and the skips; `progress` hears the documents written so far, about once a second."""
    over_budget: set[int] = set()
    with tempfile.TemporaryFile(buffering=0) as file:
        ledger = _Ledger(file)
        while True:
            pid = os.fork()
            if pid == 0:
                _child(path, fmt, name, config, ledger.records + 1, over_budget, outputs, split, file)
            status = _wait(pid, lambda: progress(ledger.read().documents.total()))
            ledger.read()
            unfinished = ledger.records + 1  # the record the child was on, if it did not finish
            if ledger.error is not None:
                raise StepFailed(f"{name}: the extraction of record {unfinished} failed: {ledger.error}")
            if status == 0:
                return ledger.documents, ledger.skips
            if status != -signal.SIGPROF or unfinished in over_budget:  # the latter: no record's time
                raise StepFailed(f"{name}: the extraction of record {unfinished} ended with exit status {status}")
            over_budget.add(unfinished)


class _Ledger:
    """What the children reported, read from the ledger file as they write it: a line per
    record done (the last line may be one a child is still writing, and waits)."""

    def __init__(self, file: BinaryIO) -> None:
        self._fd = file.fileno()
        self._position = 0  # of the first byte not read; pread leaves the children's offset alone
        self.records = 0
        self.documents: Counter[str] = Counter()
        self.skips = Skips()
        self.error: str | None = None

    def read(self) -> _Ledger:
        data = os.pread(self._fd, os.fstat(self._fd).st_size - self._position, self._position)
        complete = data[: data.rfind(b"\n") + 1]
        self._position += len(complete)
        for line in complete.splitlines():
            self._take(json.loads(line))
        return self

    def _take(self, entry: str | list[str] | dict[str, str]) -> None:
        """One ledger line: a document's split, a skip's [reason, where], or an error."""
        if isinstance(entry, dict):
            self.error = entry["error"]
            return
        self.records += 1
        if isinstance(entry, str):
            self.documents[entry] += 1
        else:
            self.skips.add(*entry)


def _wait(pid: int, tick: Callable[[], object]) -> int:
    """The child's exit status (-N: ended by signal N), calling `tick` every
    `_PROGRESS_SECONDS` while it runs. A child left running (the parent interrupted) is killed."""
    try:
        _until_exit(pid, tick)
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _until_exit(pid: int, tick: Callable[[], object]) -> None:
    pidfd = os.pidfd_open(pid)
    try:
        poll = select.poll()
        poll.register(pidfd, select.POLLIN)  # readable once the child has exited
        while not poll.poll(_PROGRESS_SECONDS * 1000):
            tick()
    finally:
        os.close(pidfd)


# -- the child ------------------------------------------------------------------------------


def _child(
    path: Path,
    fmt: str,
    name: str,
    config: ExtractConfig,
    first: int,
    over_budget: set[int],
    outputs: Mapping[str, BinaryIO],
    split: Callable[[Document], str],
    ledger: BinaryIO,
) -> NoReturn:
    """In the forked child: extract the records from `first` on, write each document and its
    ledger line, and exit (status 0; 1 after an `{"error"}` line)."""
    status = 1
    try:
        die_with_parent()  # the kernel kills it with its parent, the unit's process, if that is killed outright
        signal.signal(signal.SIGPROF, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGPROF})  # whatever the unit's thread blocked
        for where, outcome in _outcomes(path, fmt, name, config, first, over_budget):
            if isinstance(outcome, str):
                _write(ledger, _line([outcome, where]))
            else:
                into = split(outcome)
                _write(outputs[into], _line(outcome.to_json()))
                _write(ledger, _line(into))
        status = 0
    except BaseException as error:  # noqa: BLE001 - reported to the parent, which fails the unit
        _write(ledger, _line({"error": f"{type(error).__name__}: {error}"}))
        os.write(2, traceback.format_exc().encode())  # the unit's log
    finally:
        os._exit(status)


def _outcomes(
    path: Path, fmt: str, name: str, config: ExtractConfig, first: int, over_budget: set[int]
) -> Iterator[Outcome]:
    """The outcomes of the records from `first` on, each computed when the next is asked
    for, each record's document made within the CPU time a record may take."""

    def within(extract: Callable[[], Document]) -> Document:
        """`extract()`; past the seconds a record may take, SIGPROF ends the process."""
        signal.setitimer(signal.ITIMER_PROF, config.max_record_seconds)
        try:
            return extract()
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)

    if fmt == "html":
        yield (name, OVER_BUDGET) if 1 in over_budget else html_outcome(path, name, config, within)
        return
    yield from warc_outcomes(path, name, config, first, over_budget, within)


def _line(value: object) -> bytes:
    """A JSON line, as the corpus's shards hold documents (UTF-8, not escaped to ASCII)."""
    return json.dumps(value, ensure_ascii=False).encode() + b"\n"


def _write(file: BinaryIO, data: bytes) -> None:
    """All of `data`, through to the kernel (an unbuffered file may take part of it a call)."""
    view = memoryview(data)
    while view:
        view = view[file.write(view) :]
