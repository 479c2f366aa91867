"""A large object downloaded into a file by a thread of its own (`GCSStore.get_files`),
its BLAKE3 computed as the bytes stream in.

gcsfs's session is aiohttp's, which hands an answer over in new `bytes` objects: one per
read of the socket, then one per piece of the body (its parser's copy), which the file's
write and the hash then read once more. For one large object that is most of the CPU its
download costs: from fake-gcs-server over loopback, about 1.1 s per GiB with the check,
against 0.7-0.9 s for gcsfs's own `get_file` without one. Here `http.client` reads the
socket straight into one buffer, reused for the whole object (`readinto`), and the file
is written and the digest updated from that buffer while it is still in the CPU's cache:
0.40-0.70 s per GiB back to back in the benchmark, the check included, against gcsfs's
0.49-0.79 s (docs/benchmarks.md, store runs 14-16).

Each object gets a connection of its own (on GCS, a TLS handshake: a few round trips),
which is nothing next to tens of MiB; smaller objects (the thousands of small files of an
output) share aiohttp's pool of open connections instead (`OWN_CONNECTION_BYTES`).

The connection has the store's request deadline (`timeout_s`) for connecting and for
each read, as aiohttp's session has, and a try that is given up (its operation's time is
up, or another file of the download failed) shuts its socket: the thread stops at its next
read. It may still write what it holds to its own file, never to the next try's (`download`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.client
import socket
import ssl
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import blake3

# Objects of at least this size are downloaded here; smaller ones through aiohttp's pool.
OWN_CONNECTION_BYTES = 64 << 20
# Bytes of one read of the socket: the buffer the file is written and the digest updated from.
_BUFFER_BYTES = 1 << 20
# Bytes of one write to the file, as gcsfs's `get_file` writes. Writes of the whole buffer
# took a median 1.15 s of CPU per GiB where memory had been handed back to the VM's host,
# writes of 64-512 KiB 0.43-0.47 s (`bench/write_pieces.py --pause 4`, docs/benchmarks.md).
_WRITE_BYTES = 128 << 10
# Large objects in flight at once; each moves at the speed of one stream.
_threads = ThreadPoolExecutor(max_workers=8, thread_name_prefix="marinbuild-download")


class DownloadStopped(ConnectionAbortedError):
    """The try was given up while its thread was receiving."""


def unexpected_answer(status: int, reason: str, location: str) -> http.client.HTTPException:
    """An object's GET answered neither with its bytes (200) nor with an error: a partial
    or informational answer is not the object (transient: the download is tried again)."""
    return http.client.HTTPException(f"{location}: unexpected answer {status} {reason}")


@functools.cache
def _tls() -> ssl.SSLContext:
    return ssl.create_default_context()


class _Receiver:
    """One try at one object: `receive` runs on a download thread, `stop` on the event loop."""

    def __init__(self, url: str, headers: Mapping[str, str], timeout_s: float):
        parts = urlsplit(url)
        self._target = f"{parts.path}?{parts.query}"
        self._headers = dict(headers)
        if parts.scheme == "https":
            self._connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=timeout_s, context=_tls()
            )
        else:
            self._connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout_s)
        self._stopped = False
        # The connection's socket, once connected: the answer keeps reading it after the
        # connection lets go of it (an answer that closes the connection takes it over).
        self._socket: socket.socket | None = None

    def stop(self) -> None:
        self._stopped = True
        connected = self._socket  # None until connected (the thread looks at `_stopped` then)
        if connected is not None:
            with contextlib.suppress(OSError):  # closed by its thread meanwhile
                connected.shutdown(socket.SHUT_RDWR)

    def receive(self, file: BinaryIO, size: int, progress: Any, location: str) -> str:
        """The BLAKE3 of what was written to `file` (which it closes): the whole object, or
        a read past `size` bytes (a replaced object is never copied whole to find it out)."""
        from gcsfs.retry import validate_response

        with file, contextlib.closing(self._connection) as connection:
            connection.request("GET", self._target, headers=self._headers)
            self._socket = connection.sock
            if self._stopped:
                raise DownloadStopped(location)
            answer = connection.getresponse()
            if answer.status >= 400:
                validate_response(answer.status, answer.read(1 << 16).decode(errors="replace"), location)
            if answer.status != 200:
                raise unexpected_answer(answer.status, answer.reason, location)
            length = answer.length  # None for a chunked answer (http.client checks those itself)
            progress.set_size(length)
            digest = blake3.blake3()
            buffer = memoryview(bytearray(_BUFFER_BYTES))
            received = 0
            while received <= size and (read := answer.readinto(buffer)):
                if self._stopped:
                    raise DownloadStopped(location)
                chunk = buffer[:read]
                for start in range(0, read, _WRITE_BYTES):
                    file.write(chunk[start : start + _WRITE_BYTES])
                digest.update(chunk)
                received += read
                progress.relative_update(read)
            if received <= size and length is not None and received < length:
                # The connection closed early: `readinto` says so only by reading nothing.
                raise http.client.IncompleteRead(b"", length - received)
            return digest.hexdigest()


async def download(
    url: str, headers: Mapping[str, str], local: Path, size: int, progress: Any, timeout_s: float, location: str
) -> str:
    """The object at `url` into `local`, on a download thread; the BLAKE3 of what landed."""
    local.parent.mkdir(parents=True, exist_ok=True)
    # A try before this one may not have stopped yet: it writes to the file it opened,
    # which this unlinks, never to this try's.
    local.unlink(missing_ok=True)
    file = open(local, "xb")  # closed by the thread that writes to it
    receiver = _Receiver(url, headers, timeout_s)
    received = _threads.submit(receiver.receive, file, size, progress, location)
    try:
        return await asyncio.wrap_future(received)
    finally:
        receiver.stop()
        if received.cancel():  # it never started: nobody else closes the file
            file.close()
