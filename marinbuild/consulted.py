"""What a process consulted of the file system: every path it `stat`ed, listed or opened to
read while recording, each with its stat signature as it was first seen.

One recorder under every layer, rather than a list each layer keeps: a no-op build decides
from BUILD and `.star` files, directories listed for `//...` and `glob()`, sources, rule
code, the store's entries and outputs, pins, its settings — and whatever a later change
makes it read besides. Recording at the bottom, nothing it reads can be left out by
forgetting to name it: `os.stat` and `os.lstat` (which `pathlib`, `os.path` and the stat
cache call) are wrapped while recording, and opens and listings come from Python's audit
hooks (PEP 578), which the interpreter raises for every `open()` and `os.scandir()`.

What it cannot see it does not need to: `importlib` stats through its own `posix` module
(the code a process imported is signed separately: `code_files`), and a directory
entry's type from `os.scandir` is its directory's listing, whose mtime changes with it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from marinbuild.hashing import file_signature, settled

# A path's signature: (size, mtime, ctime, inode), None where it does not exist, or the
# errno of another failure to stat it (a file made unreadable is a change too).
Signature = tuple[int, int, int, int] | int | None

_stat, _lstat = os.stat, os.lstat  # the real ones, whatever is installed while recording
# About when this process started (marinbuild's first modules import this one): the code it
# imported was read before, and a signature is trusted only if the file was modified a
# timestamp granularity before that (`hashing.settled`).
STARTED_NS = time.time_ns()
_active: list[Consulted] = []
_hooked = False


@dataclass
class Consulted:
    """The paths consulted while recording, but those under `ignored` (machine-local memos,
    records of the build itself: written by every build, read by none of its decisions)."""

    ignored: tuple[str, ...] = ()
    followed: dict[str, Signature] = field(default_factory=dict)  # stat(), open(), listings
    links: dict[str, Signature] = field(default_factory=dict)  # lstat(): a symlink itself
    settled: bool = True  # every file seen was modified before the racy window of `horizon_ns`, and no step ran
    horizon_ns: int = STARTED_NS

    def abandon(self) -> None:
        """Record nothing more, and drop what was: the build will certify nothing (a step
        ran, or a file it consulted was modified within the racy window). A cold build of
        100,000 targets would otherwise hold every path its steps' staging touched."""
        self.settled = False
        self.followed.clear()
        self.links.clear()

    def saw(self, path: object, follow: bool, found: os.stat_result | int | None) -> None:
        if not self.settled:
            return  # abandoned
        if isinstance(path, int) or path is None:
            return  # a descriptor (of a file opened, and so seen) or the current directory
        text = os.fsdecode(path)  # type: ignore[arg-type]
        if not text.startswith("/"):
            text = os.path.join(os.getcwd(), text)
        if text.startswith(self.ignored) or "/__pycache__/" in text:
            return  # bytecode is checked against its source by Python itself; the sources are signed
        seen = self.followed if follow else self.links
        if text in seen:
            return  # the first sight counts: a later change shows against it
        if not isinstance(found, os.stat_result):
            seen[text] = found
        elif not follow and stat.S_ISDIR(found.st_mode):
            seen[text] = _directory_itself(found)
        elif settled(found, self.horizon_ns):
            seen[text] = file_signature(found)
        else:
            self.abandon()

    def sign(self, paths: Iterator[str] | list[str]) -> None:
        """Sign `paths` now (the code the process imported, which `importlib` stats unseen)."""
        for path in paths:
            self.saw(path, True, signature_stat(path, True))


def _directory_itself(found: os.stat_result) -> Signature:
    """What an `lstat` of a directory tells (`realpath`, `lexists`: that it is one, not a
    link to one): which directory it is, not what it holds — a listing says that, and is
    recorded as one. The directories above a workspace (`/tmp`) change all the time."""
    return (-1, 0, 0, found.st_ino)


def signature_stat(path: str, follow: bool) -> os.stat_result | int | None:
    """The stat of `path` (None: absent; an errno: another failure), unrecorded."""
    try:
        return _stat(path) if follow else _lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        return error.errno


def _recorded_stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
    return _recorded(_stat, True, path, *args, **kwargs)


def _recorded_lstat(path: object, *args: object, **kwargs: object) -> os.stat_result:
    return _recorded(_lstat, False, path, *args, **kwargs)


def _recorded(real: object, follow: bool, path: object, *args: object, **kwargs: object) -> os.stat_result:
    recorder = _active[-1] if _active else None
    try:
        found = real(path, *args, **kwargs)  # type: ignore[operator]
    except (FileNotFoundError, NotADirectoryError):
        if recorder is not None and not args and not kwargs.get("dir_fd"):
            recorder.saw(path, follow and kwargs.get("follow_symlinks", True), None)  # type: ignore[arg-type]
        raise
    except OSError as error:
        if recorder is not None and not args and not kwargs.get("dir_fd"):
            recorder.saw(path, follow and kwargs.get("follow_symlinks", True), error.errno)  # type: ignore[arg-type]
        raise
    if recorder is not None and not args and not kwargs.get("dir_fd"):
        recorder.saw(path, follow and kwargs.get("follow_symlinks", True), found)  # type: ignore[arg-type]
    return found


_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _audited(event: str, args: tuple) -> None:
    """The audit hook: opens to read, and directory listings, while a recorder is active."""
    if not _active or not _active[-1].settled:
        return
    if event == "open":
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITES)
        if not writes and not isinstance(path, int):
            _active[-1].saw(path, True, signature_stat(os.fsdecode(path), True))
    elif event in ("os.scandir", "os.listdir"):
        path = args[0]
        if path is not None and not isinstance(path, int):
            _active[-1].saw(path, True, signature_stat(os.fsdecode(path), True))


@contextlib.contextmanager
def recording(consulted: Consulted) -> Iterator[Consulted]:
    """Record into `consulted` what this process consults until the block ends."""
    global _hooked
    if not _hooked:
        sys.addaudithook(_audited)  # once per process: a hook cannot be removed
        _hooked = True
    _active.append(consulted)
    os.stat, os.lstat = _recorded_stat, _recorded_lstat  # type: ignore[assignment]
    try:
        yield consulted
    finally:
        _active.pop()
        if not _active:
            os.stat, os.lstat = _stat, _lstat


def code_files() -> list[str]:
    """The source (or extension) file of every module imported, and the directories Python
    looks modules up in: an edited module, a new one that would shadow another, a package
    installed or removed."""
    files = {module.__file__ for module in list(sys.modules.values()) if getattr(module, "__file__", None)}
    return sorted({*files, *(entry for entry in sys.path if entry)})  # type: ignore[arg-type]


def unchanged(followed: dict[str, Signature], links: dict[str, Signature]) -> bool:
    """Whether every path still has the signature it was consulted with: one `stat` each,
    stopping at the first difference."""
    for seen, follow in ((followed, True), (links, False)):
        stat_of = _stat if follow else _lstat
        for path, expected in seen.items():
            try:
                found = stat_of(path)
            except (FileNotFoundError, NotADirectoryError):
                if expected is not None:
                    return False
                continue
            except OSError as error:
                if expected != error.errno:
                    return False
                continue
            if not follow and stat.S_ISDIR(found.st_mode):
                if _directory_itself(found) != expected:
                    return False
            elif file_signature(found) != expected:
                return False
    return True
