"""Deadlines and retries for every request to a remote store (a build always ends: docs/guarantees.md).

Two limits, both settings (`store_timeout_s` and `store_retry_budget_s` in
`[tool.marinbuild]`; `MARINBUILD_STORE_TIMEOUT_S` and `MARINBUILD_STORE_RETRY_BUDGET_S`
override them on the machine where they are set):

- a *request* that gets no answer for `timeout_s` fails. gcsfs hands its aiohttp session
  that deadline for connecting and between two reads of the answer (`gcs.py`), not for
  the whole request, and a large object's own connection gets the same
  (`large_download.py`), so a transfer that keeps moving bytes is never cut, a silent
  one is;
- an *operation* (read or write an object, list, upload a directory, renew a lease...)
  that has failed for `retry_budget_s` stops the build with `StoreUnavailable`, "the
  store at URL has not answered for N s" (exit status 2). Until then a transient failure
  (a timeout, a reset connection, 408, 429, 5xx) is tried again after an exponential
  backoff with jitter; a permanent one (403, 404, 412, ...) is the store's answer and is
  raised at once.

gcsfs already retries each HTTP request itself (6 tries, 1 to 32 s apart, on the same
transient errors), which inside a long transfer retries one failed chunk rather than the
whole upload; but it knows no total, and six silent tries take six deadlines. So every
try of an operation runs under a watchdog that cancels it when the operation's time is
up (`wait`): the two layers of retries cannot add up to more than the budget. The clock
starts when the operation starts and moves on while a transfer moves bytes (`progressed`):
uploading a 100 GB checkpoint for an hour is not an hour without an answer.

Work that tries again by itself later (a running step's log and checkpoint uploads, a
lease's release) runs `briefly()`: one request deadline instead of the whole budget. A
lease renewal runs `before(expiry)`: a holder that cannot renew must learn it before its
lease expires and another builder may take it over.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

from marinbuild.errors import StoreError, StoreUnavailable

T = TypeVar("T")

TIMEOUT_ENV = "MARINBUILD_STORE_TIMEOUT_S"
BUDGET_ENV = "MARINBUILD_STORE_RETRY_BUDGET_S"
# A try with less time than this left is not worth starting.
_MIN_TRY_S = 0.1
# 408 Request Timeout, 429 Too Many Requests, and every server error.
_TRANSIENT_STATUS = frozenset({408, 429, *range(500, 600)})


@dataclass(frozen=True)
class StorePolicy:
    """How long a remote store may stay silent.

    60 s per request: GCS answers a metadata request in tens of milliseconds and sends the
    first bytes of any object within a second; a minute of silence is a dead connection or
    a stalled server, not a slow answer. 300 s per operation: long enough to ride out a
    restarting server or a few minutes of 503s (GCS asks clients to back off up to 32 s
    between tries, so that is several tries), short enough that a build against a store
    that is gone ends in minutes instead of hanging, and longer than a default lease
    (60 s), so that a short outage costs leases rather than builds."""

    timeout_s: float = 60.0
    retry_budget_s: float = 300.0
    first_backoff_s: float = 1.0
    max_backoff_s: float = 32.0

    @classmethod
    def resolve(cls, timeout_s: float | None = None, retry_budget_s: float | None = None) -> StorePolicy:
        """The policy from the settings (None: the default), each overridden by its
        environment variable where that is set."""
        return cls(
            timeout_s=_seconds(TIMEOUT_ENV, timeout_s, cls.timeout_s),
            retry_budget_s=_seconds(BUDGET_ENV, retry_budget_s, cls.retry_budget_s),
        )

    def backoff(self, retry: int, rng: random.Random | None = None) -> float:
        """The pause before retry number `retry` (1, 2, ...): a ceiling that doubles up to
        `max_backoff_s`, of which the upper half is random, so that builders that failed
        together do not all try again together. Each pause is at least the previous one."""
        ceiling = min(self.max_backoff_s, self.first_backoff_s * 2 ** (retry - 1))
        return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


def _seconds(variable: str, setting: float | None, default: float) -> float:
    text = os.environ.get(variable)
    if text is None:
        return default if setting is None else float(setting)
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise StoreError(f"{variable} must be a positive number of seconds, got {text!r}")
    return value


# -- what fails for a while, and what is an answer --------------------------------------------


def is_transient(error: BaseException) -> bool:
    """Whether trying again may succeed: a timeout, a broken connection, 408, 429, 5xx.
    Absence (404), a failed precondition (412), a refusal (401, 403) and a bad request
    (400) are the store's answer, the same the next time."""
    if isinstance(error, (FileNotFoundError, FileExistsError, PermissionError, StoreError)):
        return False
    status = _status(error)
    if status is not None:
        # An expired access token: gcsfs refreshes it on the next try.
        return status in _TRANSIENT_STATUS or (status == 401 and "Invalid Credentials" in str(error))
    if isinstance(error, (TimeoutError, ConnectionError)):  # asyncio's and fsspec's timeouts too
        return True
    return _transient_library_error(error)


def _status(error: BaseException) -> int | None:
    """The HTTP status an error carries (gcsfs's HttpError, aiohttp's ClientResponseError...)."""
    for name in ("status", "code"):
        value = getattr(error, name, None)
        try:
            status = int(value) if value is not None and not isinstance(value, bool) else None
        except (TypeError, ValueError):
            continue
        if status is not None and 100 <= status < 600:
            return status
    return None


def _transient_library_error(error: BaseException) -> bool:
    """Connection-level errors of the HTTP libraries below gcsfs. Looked up among the
    modules already imported: an error cannot be of a library that was never loaded, and
    the store must not pay for importing them."""
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is not None and isinstance(error, aiohttp.ClientError):
        return not isinstance(error, aiohttp.InvalidURL)  # statuses were looked at above
    requests = sys.modules.get("requests.exceptions")
    if requests is not None and isinstance(
        error,
        (
            requests.ConnectionError,  # gcsfs reports a 502 as ProxyError, one of these
            requests.Timeout,
            requests.ChunkedEncodingError,
            requests.ContentDecodingError,
        ),
    ):
        return True
    http_client = sys.modules.get("http.client")  # large downloads (`large_download.py`)
    if http_client is not None and isinstance(error, http_client.HTTPException):
        return True  # an answer cut short or garbled (IncompleteRead, BadStatusLine...)
    auth = sys.modules.get("google.auth.exceptions")
    if auth is not None:
        if isinstance(error, auth.TransportError):
            return True
        if isinstance(error, auth.RefreshError):
            return bool(getattr(error, "retryable", False))
    gcsfs_retry = sys.modules.get("gcsfs.retry")
    return gcsfs_retry is not None and isinstance(error, gcsfs_retry.ChecksumError)


# -- one operation's clock ---------------------------------------------------------------------


class DeadlineExceeded(TimeoutError):
    """A try was cancelled because its operation's time was up."""


class _Clock:
    """When an operation must have succeeded by: `window_s` after it started or last moved
    bytes, and never later than `cap` (a caller's own deadline, e.g. a lease's expiry)."""

    def __init__(self, window_s: float, cap: float | None):
        self.started = self.since = time.monotonic()
        self.window_s = window_s
        self.cap = cap

    def progressed(self) -> None:
        """Bytes moved (called from fsspec's event loop thread: one assignment)."""
        self.since = time.monotonic()

    def until(self) -> float:
        until = self.since + self.window_s
        return until if self.cap is None else min(until, self.cap)

    def left(self) -> float:
        return self.until() - time.monotonic()

    def silent_s(self) -> float:
        return time.monotonic() - self.since


_operation: ContextVar[_Clock | None] = ContextVar("marinbuild_store_operation", default=None)
_brief: ContextVar[bool] = ContextVar("marinbuild_store_brief", default=False)
_cap: ContextVar[float | None] = ContextVar("marinbuild_store_cap", default=None)


@contextlib.contextmanager
def briefly() -> Iterator[None]:
    """Operations in this block (of this thread) get one request deadline (`timeout_s`)
    instead of the whole retry budget: for work that is tried again later anyway."""
    token = _brief.set(True)
    try:
        yield
    finally:
        _brief.reset(token)


@contextlib.contextmanager
def before(seconds: float) -> Iterator[None]:
    """Operations in this block (of this thread) give up `seconds` from now at the latest."""
    cap = time.monotonic() + max(seconds, 0.0)
    outer = _cap.get()
    token = _cap.set(cap if outer is None else min(cap, outer))
    try:
        yield
    finally:
        _cap.reset(token)


def current() -> _Clock | None:
    """The clock of the operation this thread is in, if any (transfers report progress to it)."""
    return _operation.get()


def call(
    policy: StorePolicy,
    url: str,
    operation: Callable[[], T],
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    """Run `operation`, trying again after transient failures until it succeeds or its
    time is up, then raise StoreUnavailable. An operation within another one (a store
    method calling another) is tried once: the outermost one retries, so retries never
    nest."""
    if _operation.get() is not None:
        return operation()
    clock = _Clock(policy.timeout_s if _brief.get() else policy.retry_budget_s, _cap.get())
    token = _operation.set(clock)
    try:
        retry = 0
        while True:
            try:
                return operation()
            except Exception as error:
                if not is_transient(error):
                    raise
                retry += 1
                pause = policy.backoff(retry, rng)
                if clock.left() - pause < _MIN_TRY_S:
                    raise unavailable(url, clock.silent_s(), error) from error
                sleep(pause)
    finally:
        _operation.reset(token)


def unavailable(url: str, seconds: float, error: BaseException) -> StoreUnavailable:
    detail = str(error) or type(error).__name__
    return StoreUnavailable(
        f"the store at {url} has not answered for {seconds:.0f} s (last: {detail})",
        hint=f"check the network and the store (and STORAGE_EMULATOR_HOST if you use an emulator); "
        f"store_timeout_s and store_retry_budget_s in [tool.marinbuild] (or {TIMEOUT_ENV}, {BUDGET_ENV}) "
        "set how long marinbuild waits",
    )


def wait(future: concurrent.futures.Future[T]) -> T:
    """The result of one try running on fsspec's event loop, cancelled once its operation's
    time is up (its clock moves on while the try moves bytes)."""
    clock = _operation.get()
    try:
        while True:
            left = None if clock is None else clock.left()
            if left is not None and left <= 0:
                future.cancel()
                raise DeadlineExceeded(f"no answer within {clock.silent_s():.0f} s")
            done, _ = concurrent.futures.wait([future], timeout=left)
            if done:
                return future.result()
    except BaseException:
        future.cancel()  # interrupted (Ctrl-C) or timed out: the try must not run on unseen
        raise
