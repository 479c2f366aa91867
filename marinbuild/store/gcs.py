"""A store in a Google Cloud Storage bucket (`gs://bucket/prefix`), through gcsfs.

Every guarantee the local store gets from the filesystem comes here from GCS's
generation preconditions, sent through the JSON API with gcsfs's authenticated session:

- `create_only` uploads with `ifGenerationMatch=0`: of two builders publishing one key,
  GCS accepts exactly one entry and answers 412 to the other;
- a lease is an object whose every update is matched to the generation its holder last
  wrote (`lease_object.py`), so a holder that was taken over finds out at its next
  heartbeat;
- each object's CRC32C, kept by GCS and returned by listings, checks uploads and lets a
  lookup verify an entry's outputs without downloading them.

Every request has a deadline (`deadlines.py`): gcsfs's aiohttp session gets the store's
`timeout_s` for connecting and between two reads of an answer (by default it has none, and
a server that accepts a connection and never answers hangs a build for ever), and every
operation gives up once the store has not answered for the retry budget. A write retried
after a timeout may be refused (412) although the first try went through: `create_only`
recognises its own bytes, and the lease (`lease_object.py`) its own token.

`STORAGE_EMULATOR_HOST` points gcsfs at an emulator (anonymous), and tensorstore too
(`TENSORSTORE_GCS_HTTP_URL`, for steps that read the store directly); otherwise the
default Google credentials are used.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import blake3

from marinbuild.errors import StoreError
from marinbuild.network import unreachable
from marinbuild.store import deadlines, large_download
from marinbuild.store.base import Lease, WaitingFn
from marinbuild.store.deadlines import StorePolicy
from marinbuild.store.lease_object import LeaseSettings, current_holder, held_lease
from marinbuild.store.remote import RemoteStore, backend_errors, backend_writes
from marinbuild.store.transfers import transfer_callback

_PUBLIC_ENDPOINT = "https://storage.googleapis.com"
_BOUNDARY = "marinbuild-part"
# Rewrites of one copy in flight at once: each is a request GCS answers when it has moved
# the object (or a chunk of a large one), so a few overlap the round trips.
_PARALLEL_REWRITES = 8
# Objects of one download in flight at once: as many as the session's connection pool
# holds (aiohttp's default), for outputs of many small files, where round trips dominate.
_PARALLEL_DOWNLOADS = 100
# What aiohttp buffers of an answer before it stops reading the socket (its default, 64
# KiB, pauses and resumes the socket every few chunks of a large download).
_READ_BUFFER = 1 << 20
# Bytes a download receives between two progress reports (each also keeps its deadline away).
_REPORT_BYTES = 1 << 20

# gcsfs logs each request it gives up on, with a traceback, and Python prints that on
# stderr when nobody configured logging. The deadlines retry it, and what finally fails
# is reported once, by the CLI, naming the store and its last error. (Configured
# logging still receives gcsfs's records.)
logging.getLogger("gcsfs").addHandler(logging.NullHandler())


def _backend_error_types() -> tuple[type[BaseException], ...]:
    import http.client

    import aiohttp
    import google.auth.exceptions
    import requests
    from gcsfs.retry import HttpError

    # gcsfs reports a 400 (an invalid bucket name, say) as ValueError.
    return (
        OSError,
        ValueError,
        HttpError,
        aiohttp.ClientError,
        http.client.HTTPException,
        google.auth.exceptions.GoogleAuthError,
        requests.RequestException,
    )


class GCSStore(RemoteStore):
    exclusive_leases = True

    def __init__(self, url: str, local_dir: Path, policy: StorePolicy | None = None):
        super().__init__(url, local_dir, policy)
        self.backend_error_types = _backend_error_types()
        self.bucket, _, self.prefix = self.url.removeprefix("gs://").partition("/")
        if not self.bucket:
            raise StoreError(f"store URL '{url}' names no bucket", hint="e.g. gs://team-bucket/marinbuild")
        endpoint = os.environ.get("STORAGE_EMULATOR_HOST")
        if endpoint:
            # Steps that read the store through tensorstore (Levanter) must use the emulator
            # too, from the first one, even where this process itself reads nothing (a Ray
            # host running a step that reads URLs); else tensorstore asks the real GCS.
            os.environ.setdefault("TENSORSTORE_GCS_HTTP_URL", endpoint)

    @functools.cached_property
    def fs(self) -> Any:
        import aiohttp
        import gcsfs

        endpoint = os.environ.get("STORAGE_EMULATOR_HOST")
        self._check_reachable(endpoint or _PUBLIC_ENDPOINT)
        # No total: a transfer that keeps moving bytes may take as long as it takes.
        deadline = self.policy.timeout_s
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=deadline, sock_read=deadline)
        return gcsfs.GCSFileSystem(
            token="anon" if endpoint else None,
            requests_timeout=timeout,
            session_kwargs={"read_bufsize": _READ_BUFFER},
        )

    def _check_reachable(self, endpoint: str) -> None:
        problem = unreachable(endpoint, "http", 80)
        if problem is not None:
            raise StoreError(
                f"store {self.url} is unreachable: {problem}",
                hint="check the network (and STORAGE_EMULATOR_HOST if you use an emulator); nothing local was changed",
            )

    @functools.cached_property
    def root(self) -> str:
        return f"{self.bucket}/{self.prefix}".rstrip("/")

    def _key(self, path: str) -> str:
        return f"{self.prefix}/{path}" if self.prefix else path

    def checksum(self, info: Mapping[str, Any]) -> str | None:
        crc32c, md5 = info.get("crc32c"), info.get("md5Hash")
        return f"crc32c:{crc32c}" if crc32c else f"md5:{md5}" if md5 else None

    def local_checksum(self, path: Path) -> str | None:
        import google_crc32c

        checksum = google_crc32c.Checksum()
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                checksum.update(block)
        return f"crc32c:{base64.b64encode(checksum.digest()).decode()}"

    def signature(self, path: str) -> Any:
        versioned = self._metadata(path)
        return None if versioned is None else self._signature(versioned)

    def _signature(self, info: Mapping[str, Any]) -> Any:
        """An object's generation: GCS gives every write of a name a new one."""
        return str(info["generation"])

    # -- conditional operations ---------------------------------------------------------

    @backend_errors
    def _metadata(self, path: str) -> dict[str, Any] | None:
        try:
            return self._io("call", "GET", "b/{}/o/{}", self.bucket, self._key(path), json_out=True)
        except FileNotFoundError:
            return None

    @backend_errors
    def read_versioned(self, path: str) -> tuple[bytes, int] | None:
        """An object's bytes and the generation they belong to; None if absent."""
        while True:
            metadata = self._metadata(path)
            if metadata is None:
                return None
            generation = int(metadata["generation"])
            try:
                _headers, data = self._io(
                    "call", "GET", "b/{}/o/{}", self.bucket, self._key(path), alt="media", generation=generation
                )
            except FileNotFoundError:
                continue  # replaced between the two requests: read the new one
            return data, generation

    @backend_writes
    def write_if_generation(
        self, path: str, data: bytes, generation: int, metadata: Mapping[str, str] | None = None
    ) -> int:
        """Write `path` only if its generation is `generation` (0: only if absent), with the
        custom `metadata` that listings show beside it.

        Returns the new generation; FileExistsError if GCS refused (412). A multipart
        upload: GCS (and fake-gcs-server) check the precondition on it."""
        resource = json.dumps({"name": self._key(path), **({"metadata": dict(metadata)} if metadata else {})})
        body = (
            (
                f"--{_BOUNDARY}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{resource}\r\n"
                f"--{_BOUNDARY}\r\nContent-Type: application/octet-stream\r\n\r\n"
            ).encode()
            + data
            + f"\r\n--{_BOUNDARY}--".encode()
        )
        written = self._io(
            "call",
            "POST",
            f"{self.fs._location}/upload/storage/v1/b/{quote(self.bucket)}/o",
            uploadType="multipart",
            ifGenerationMatch=str(generation),
            headers={"Content-Type": f'multipart/related; boundary="{_BOUNDARY}"'},
            data=body,
            json_out=True,
        )
        self.fs.invalidate_cache()
        return int(written["generation"])

    @backend_writes
    def delete_if_generation(self, path: str, generation: int) -> None:
        """Delete `path` unless someone replaced it since `generation`."""
        try:
            self._io("call", "DELETE", "b/{}/o/{}", self.bucket, self._key(path), ifGenerationMatch=str(generation))
        except (FileNotFoundError, FileExistsError):
            pass  # gone, or taken over: either way no longer ours

    def create_only(self, path: str, data: bytes, metadata: Mapping[str, str] | None = None) -> bool:
        try:
            self.write_if_generation(path, data, 0, metadata)
        except FileExistsError:
            # A create retried after a timeout (by gcsfs or by the deadlines) is refused if
            # the first try went through: an object holding exactly these bytes is ours (an
            # entry's bytes name its attempt; identical metadata is the same either way).
            return self.read_bytes(path) == data
        except FileNotFoundError:
            raise StoreError(
                f"store {self.url}: bucket {self.bucket} does not exist",
                hint=f"create it: gcloud storage buckets create gs://{self.bucket}",
            ) from None
        return True

    # -- downloads ---------------------------------------------------------------------------

    def get_files(
        self, files: Mapping[str, Path], total_bytes: int = 0, sizes: Mapping[str, int] | None = None
    ) -> dict[Path, str]:
        """Download objects to local files, each streamed by a request of our own rather than
        gcsfs's `get`: the bytes are written as they arrive and, for files checked against
        a manifest (`sizes`), hashed from memory as they land, so the BLAKE3 of a 1 GiB
        output costs no second pass; such a download stops once it grows past its size (a
        replaced object is never copied whole to find it out). Large objects are received
        by threads of their own (`large_download.py`), small ones on gcsfs's event loop. A
        try that fails keeps the files it finished: the retry downloads the others."""
        landed: dict[Path, str | None] = {}
        if files:
            self._download(files, landed, total_bytes, sizes)
        return {local: digest for local, digest in landed.items() if digest is not None}

    @backend_errors
    def _download(
        self, files: Mapping[str, Path], landed: dict[Path, str | None], total: int, sizes: Mapping[str, int] | None
    ) -> None:
        progress = transfer_callback("downloaded", total)
        progress.set_size(len(files))
        progress.relative_update(len(landed))
        limit = asyncio.Semaphore(_PARALLEL_DOWNLOADS)

        async def download(path: str, local: Path) -> None:
            size = None if sizes is None else sizes[path]
            async with limit:
                landed[local] = await self._stream(path, local, progress.branched(path, str(local)), size)
            progress.relative_update(1)

        async def download_all() -> None:
            try:
                async with asyncio.TaskGroup() as group:  # one fails: the others are cancelled
                    for path, local in files.items():
                        if local not in landed:
                            group.create_task(download(path, local))
            except ExceptionGroup as failures:
                raise failures.exceptions[0] from None  # the first failure, as gcsfs's `get` raises it

        deadlines.wait(asyncio.run_coroutine_threadsafe(download_all(), self.fs.loop))

    async def _stream(self, path: str, local: Path, progress: Any, size: int | None) -> str | None:
        """One object into `local`, chunk by chunk as the socket delivers them. Given the
        `size` it must have: the BLAKE3 of what landed, which stops a chunk past that size."""
        from gcsfs.retry import validate_response

        fs = self.fs
        url, location, headers = fs.url(self._full(path)), self.location(path), fs._get_headers(None)
        if size is not None and size >= large_download.OWN_CONNECTION_BYTES:
            return await large_download.download(url, headers, local, size, progress, self.policy.timeout_s, location)
        await fs._set_session()
        async with fs.session.get(url, headers=headers, timeout=fs.requests_timeout) as answer:
            if answer.status >= 400:
                validate_response(answer.status, await answer.read(), location)
            if answer.status != 200:
                raise large_download.unexpected_answer(answer.status, answer.reason or "", location)
            progress.set_size(answer.content_length)
            local.parent.mkdir(parents=True, exist_ok=True)
            received = reported = 0  # reported a MiB at a time, not per chunk (4,000 chunks per GiB)
            digest = blake3.blake3()
            with open(local, "wb") as file:
                # Chunks as they came (`readany` joins what has arrived: a copy).
                async for chunk, _ in answer.content.iter_chunks():
                    file.write(chunk)
                    received += len(chunk)
                    if received - reported >= _REPORT_BYTES:
                        progress.relative_update(received - reported)
                        reported = received
                    if size is not None:
                        digest.update(chunk)
                        if received > size:
                            break  # not the manifest's file: its digest cannot match
                progress.relative_update(received - reported)
                return None if size is None else digest.hexdigest()

    # -- regions -----------------------------------------------------------------------------

    @backend_errors
    def bucket_location(self) -> str:
        """Where GCS keeps the bucket (`us-central2`, `europe-west4`, a multi-region `us`),
        lower-cased; a bucket's location never changes."""
        metadata = self._io("call", "GET", "b/{}", self.bucket, json_out=True)
        return str(metadata.get("location", "")).lower()

    @backend_writes
    def rewrite_from(self, source: GCSStore, paths: Mapping[str, str], total_bytes: int) -> None:
        """Copy objects of another bucket into this one with GCS's rewrite: the bytes move
        between the buckets inside Google, none through this machine. `paths` maps each
        source path (under `source`'s root) to its path here.

        A large or cross-region object takes several calls (each answers with a token to
        continue); every answer moves the operation's deadline on, as bytes moving in a
        download do, and is reported as progress (MiB copied)."""
        callback = transfer_callback("copied", total_bytes)
        callback.set_size(len(paths))
        limit = asyncio.Semaphore(_PARALLEL_REWRITES)

        async def rewrite(origin: str, destination: str) -> None:
            progress = callback.branched(origin, destination)
            token = None
            async with limit:
                while True:
                    answer = await self.fs._call(
                        "POST",
                        "b/{}/o/{}/rewriteTo/b/{}/o/{}",
                        source.bucket,
                        source._key(origin),
                        self.bucket,
                        self._key(destination),
                        headers={"Content-Type": "application/json"},
                        rewriteToken=token,
                        json_out=True,
                    )
                    progress.absolute_update(int(answer.get("totalBytesRewritten", 0)))
                    if answer.get("done"):
                        break
                    token = answer["rewriteToken"]
            callback.relative_update(1)

        async def rewrite_all() -> None:
            await asyncio.gather(*(rewrite(origin, destination) for origin, destination in paths.items()))

        deadlines.wait(asyncio.run_coroutine_threadsafe(rewrite_all(), self.fs.loop))
        self.fs.invalidate_cache()

    def lease_holder(self, name: str) -> str | None:
        holder = current_holder(self, name)
        return None if holder is None else holder.describe()

    @contextmanager
    def lease(self, name: str, waiting: WaitingFn | None = None) -> Iterator[Lease]:
        with held_lease(self, name, LeaseSettings.from_env(), waiting) as lease:
            yield lease
