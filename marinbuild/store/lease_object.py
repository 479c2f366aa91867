"""Leases kept as objects in a bucket, fenced by generation preconditions.

A lease is the object `locks/<kk>/<key>.lock` holding its owner (user, host, pid), a
random token and the wall-clock time it expires. Every write is matched to a generation:

- acquire: create with `ifGenerationMatch=0`; if it exists and has not expired, wait
  (telling the caller who holds it) and poll;
- takeover: a lease past its expiry (its holder died or lost the network) is
  overwritten with `ifGenerationMatch=<the generation read>`, so of several waiters
  exactly one takes it;
- heartbeat: the holder pushes the expiry forward every `ttl/3` seconds (never more
  than once a second: GCS allows about one write per second per object), matched to
  the generation it last wrote; a 412 means somebody took the lease over, and the
  holder marks it lost, which stops the running action;
- release: delete matched to the last generation, so a holder never deletes its
  successor's lease.

A renewal must not outlive the lease it renews: it gives up when the lease expires
(`deadlines.before`), and a holder that could not renew by then marks the lease lost,
which stops its step, which is then not published. A renewal retried after a timeout may
be refused (412) although its first try went through: the holder reads the lease back and,
if it still holds its own token (nobody took it over), renews on top of it. Releasing is
tried only briefly: a lease that cannot be deleted simply expires.

Expiry compares wall clocks across machines; the TTL (`MARINBUILD_LEASE_TTL_S`,
default 60 s) must dwarf their skew.
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from marinbuild.errors import StoreError
from marinbuild.store import deadlines
from marinbuild.store.base import Lease, WaitingFn

_MIN_HEARTBEAT_S = 1.0  # GCS: about one write per second per object


class VersionedObjects(Protocol):
    """The generation-matched operations a lease needs (implemented by the GCS store)."""

    def read_versioned(self, path: str) -> tuple[bytes, int] | None: ...

    def write_if_generation(self, path: str, data: bytes, generation: int) -> int: ...

    def delete_if_generation(self, path: str, generation: int) -> None: ...


@dataclass(frozen=True)
class LeaseSettings:
    ttl_s: float = 60.0

    @classmethod
    def from_env(cls) -> LeaseSettings:
        return cls(ttl_s=float(os.environ.get("MARINBUILD_LEASE_TTL_S", cls.ttl_s)))

    @property
    def heartbeat_s(self) -> float:
        return max(self.ttl_s / 3, _MIN_HEARTBEAT_S)

    @property
    def poll_s(self) -> float:
        return min(max(self.ttl_s / 6, 0.2), 5.0)


@dataclass(frozen=True)
class Holder:
    user: str
    host: str
    pid: int
    token: str
    expires: float

    def to_bytes(self) -> bytes:
        return json.dumps(self.__dict__, sort_keys=True).encode()

    @classmethod
    def parse(cls, data: bytes) -> Holder | None:
        try:
            fields: dict[str, Any] = json.loads(data)
            return cls(
                str(fields["user"]),
                str(fields["host"]),
                int(fields["pid"]),
                str(fields["token"]),
                float(fields["expires"]),
            )
        except (ValueError, KeyError, TypeError):
            return None  # unreadable: treated as expired

    def describe(self) -> str:
        remaining = max(self.expires - time.time(), 0)
        return f"{self.user}@{self.host} (pid {self.pid}) holds it, for {remaining:.0f} s more unless renewed"


def _me(token: str, ttl_s: float) -> Holder:
    return Holder(getpass.getuser(), socket.gethostname(), os.getpid(), token, time.time() + ttl_s)


def current_holder(objects: VersionedObjects, name: str) -> Holder | None:
    """The holder of an unexpired lease, if any."""
    current = objects.read_versioned(name)
    holder = None if current is None else Holder.parse(current[0])
    return holder if holder is not None and holder.expires >= time.time() else None


def _acquire(
    objects: VersionedObjects, name: str, token: str, settings: LeaseSettings, waiting: WaitingFn | None
) -> int:
    """Block until this builder holds the lease; its generation."""
    shown: str | None = None
    while True:
        current = objects.read_versioned(name)
        holder = None if current is None else Holder.parse(current[0])
        try:
            if current is None:
                return objects.write_if_generation(name, _me(token, settings.ttl_s).to_bytes(), 0)
            if holder is not None and holder.token == token:
                return current[1]  # our own create, answered 412 on a retry
            if holder is None or holder.expires < time.time():
                return objects.write_if_generation(name, _me(token, settings.ttl_s).to_bytes(), current[1])
        except FileExistsError:
            continue  # another builder got there first: look again
        if waiting is not None and holder.token != shown:
            shown = holder.token
            waiting(f"waiting for the lease: {holder.describe()}")
        time.sleep(settings.poll_s)


class _Heartbeat(threading.Thread):
    def __init__(self, objects: VersionedObjects, lease: Lease, token: str, generation: int, settings: LeaseSettings):
        super().__init__(name=f"lease {lease.name}", daemon=True)
        self.objects, self.lease, self.token, self.generation, self.settings = (
            objects,
            lease,
            token,
            generation,
            settings,
        )
        self.stopping = threading.Event()
        self.expires = time.time() + settings.ttl_s

    def run(self) -> None:
        while not self.stopping.wait(self.settings.heartbeat_s):
            renewed = _me(self.token, self.settings.ttl_s)
            try:
                with deadlines.before(self.expires - time.time()):
                    self.generation = self._renew(renewed)
                self.expires = renewed.expires
            except FileExistsError:
                self.lease.mark_lost()  # taken over
                return
            except StoreError:
                if time.time() >= self.expires:
                    self.lease.mark_lost()  # unreachable until expiry: someone may have taken it
                    return

    def _renew(self, renewed: Holder) -> int:
        """Write the renewal; its generation. FileExistsError if another builder holds the
        lease now. A renewal of ours that went through unanswered (this one, retried, or an
        earlier one given up on) makes the lease's generation newer than the one we know:
        the lease still holds our token, and is renewed on top of that generation."""
        try:
            return self.objects.write_if_generation(self.lease.name, renewed.to_bytes(), self.generation)
        except FileExistsError:
            current = self.objects.read_versioned(self.lease.name)
            holder = None if current is None else Holder.parse(current[0])
            if current is None or holder is None or holder.token != self.token:
                raise
            return self.objects.write_if_generation(self.lease.name, renewed.to_bytes(), current[1])


@contextmanager
def held_lease(
    objects: VersionedObjects, name: str, settings: LeaseSettings, waiting: WaitingFn | None
) -> Iterator[Lease]:
    token = secrets.token_hex(8)
    generation = _acquire(objects, name, token, settings, waiting)
    lease = Lease(name)
    heartbeat = _Heartbeat(objects, lease, token, generation, settings)
    heartbeat.start()
    try:
        yield lease
    finally:
        heartbeat.stopping.set()
        heartbeat.join()
        if not lease.lost:
            try:
                with deadlines.briefly():
                    objects.delete_if_generation(name, heartbeat.generation)
            except StoreError:
                pass  # unreachable now: the lease simply expires
