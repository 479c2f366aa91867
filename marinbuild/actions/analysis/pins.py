"""External artifacts: pinning what a URL holds, and checking it at every build.

An `external` target names data that no build made. `pin` lists it (nothing is
downloaded), keeps the listing in the store (so a later change can be named object by
object) and records its digest in `marinbuild.lock`. `resolve` — what the scheduler asks
for an external target — lists the URL again and returns the pinned digest as the
target's output digest, or stops the build (exit 2, at the target's BUILD line) when the
contents changed or were never pinned.
"""

from __future__ import annotations

import getpass
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from marinbuild.errors import GraphError, StoreReadOnly
from marinbuild.hashing import StatCache
from marinbuild.packages.lockfile import LockFile, Pin
from marinbuild.store import Outputs, Records, open_store
from marinbuild.store.listing import Listing, list_objects
from marinbuild.store.manifest import Manifest
from marinbuild.targets.rule import Target


@dataclass(frozen=True)
class Pinned:
    """What `marinbuild pin` did to one target: its new pin and what changed since the last."""

    label: str
    pin: Pin
    changes: list[str]  # against the previous pin's listing; empty if none or unchanged
    previous: Pin | None


class Pins:
    def __init__(self, root: Path, records: Records, machine_dir: Path, stat_cache: StatCache):
        self.root, self.records, self.machine_dir, self.stat_cache = root, records, machine_dir, stat_cache

    def _list(self, url: str) -> Listing:
        return list_objects(open_store(url, self.machine_dir, self.stat_cache), url, self.stat_cache)

    def _stored(self, digest: str) -> Listing | None:
        data = self.records.read_listing(digest)
        return None if data is None else Listing.from_json(data)

    def resolve(self, target: Target) -> Outputs:
        label, url = str(target.label), target.attrs["url"]
        pin = LockFile.read(self.root).pins.get(label)
        if pin is None or pin.url != url:
            why = "was never pinned" if pin is None else f"was pinned at another URL ({pin.url})"
            raise GraphError(
                f"external artifact {label} {why}",
                location=target.location,
                hint=f"run 'marinbuild pin {label}', and commit marinbuild.lock with the BUILD file",
            )
        listing = self._list(url)
        if listing.digest != pin.digest:
            before = self._stored(pin.digest)
            now = f"now {len(listing.objects)} objects, {listing.total_bytes:,} bytes"
            changes = (
                listing.changes_since(before)
                if before is not None
                else [f"{now} (pinned: {pin.objects} objects, {pin.bytes:,} bytes)"]
            )
            raise GraphError(
                f"the objects at {url} changed since {label} was pinned ({pin.pinned}, by {pin.by}):\n    "
                + "\n    ".join(changes),
                location=target.location,
                hint=f"if the new contents are what you want, 'marinbuild pin {label}' accepts them "
                "(what depends on it then rebuilds)",
            )
        return Outputs(pin.digest, pin.digest, Manifest(()), url, pinned=True)

    def describe(self, target: Target) -> dict[str, Any]:
        """What `marinbuild show` says of an external artifact: where it lives, its pin, and
        whether what the URL holds now is still what was pinned."""
        label, url = str(target.label), target.attrs["url"]
        pin = LockFile.read(self.root).pins.get(label)
        description: dict[str, Any] = {"label": label, "external": True, "url": url, "pin": None}
        if pin is not None:
            description["pin"] = asdict(pin)
            description["current"] = self._list(url).digest == pin.digest
        return description

    def pin(self, targets: list[Target]) -> list[Pinned]:
        """List each target's URL and record its digest in marinbuild.lock."""
        lock = LockFile.read(self.root)
        done = []
        for target in targets:
            label, url = str(target.label), target.attrs["url"]
            listing = self._list(url)
            try:
                self.records.write_listing(listing.digest, listing.to_json())
            except StoreReadOnly:
                pass  # the pin still holds; only a later change cannot be named object by object
            previous = lock.pins.get(label)
            before = None if previous is None or previous.digest == listing.digest else self._stored(previous.digest)
            pin = Pin(
                url,
                listing.digest,
                len(listing.objects),
                listing.total_bytes,
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                f"{getpass.getuser()}@{socket.gethostname()}",
            )
            lock = lock.with_pin(label, pin)
            done.append(Pinned(label, pin, [] if before is None else listing.changes_since(before), previous))
        lock.write()
        return done
