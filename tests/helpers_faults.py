"""Faults of the network and of a bucket for the store tests: a proxy that cuts, stalls or
corrupts what passes through it, and what a bucket holds that it should not.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import blake3

from marinbuild.store import layout

# Short deadlines, so that a fault costs seconds. BOUND_S bounds a hang, it is no speed test.
TIMEOUT_S = 1.0
BOUND_S = 45.0
TRICKLE_S = 0.2  # between two pieces of a trickled answer: well within TIMEOUT_S


class FaultyProxy:
    """Forwards every request to `target`, but holds back the answer to those `swallow`
    picks (the client times out although the server did what was asked: a write that
    went through unanswered, to be retried), and answers those `refuse` picks with its
    status without forwarding them (403: an account that may only read). Of the answers
    `cut` picks it sends only the first half of the body, then closes the connection (a
    download broken off mid-object); of those `stall` picks, the first half, then nothing
    (a server that hangs mid-object); those `trickle` picks go out 256 KiB every
    `TRICKLE_S` (a slow link, never silent for a deadline); those `recode` picks go out
    whole with the status it gives instead of the server's. `edit` may change an answer's
    body (tests/engine/store/test_regions.py: the location of a bucket, which fake-gcs-server sets for
    all its buckets at once)."""

    def __init__(
        self,
        target: str,
        swallow: Callable[[str, str], bool] = lambda method, path: False,
        refuse: Callable[[str, str], int | None] = lambda method, path: None,
        edit: Callable[[str, str, bytes], bytes] = lambda method, path, body: body,
        cut: Callable[[str, str], bool] = lambda method, path: False,
        stall: Callable[[str, str], bool] = lambda method, path: False,
        trickle: Callable[[str, str], bool] = lambda method, path: False,
        recode: Callable[[str, str], int | None] = lambda method, path: None,
    ):
        host, port = urlsplit(target).hostname, urlsplit(target).port
        self.swallowed: list[str] = []
        self.refused: list[str] = []
        self.cut: list[str] = []
        self.requests: list[str] = []  # every request, in the order it came
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.requests.append(f"{self.command} {self.path}")
                status = refuse(self.command, self.path)
                if status is not None:
                    proxy.refused.append(f"{self.command} {self.path}")
                    error = json.dumps({"error": {"code": status, "message": "refused by the test's proxy"}}).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(error)))
                    self.end_headers()
                    self.wfile.write(error)
                    return
                upstream = http.client.HTTPConnection(host, port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
                upstream.request(self.command, self.path, body, headers)
                answer = upstream.getresponse()
                data = edit(self.command, self.path, answer.read())
                upstream.close()
                if swallow(self.command, self.path):
                    proxy.swallowed.append(f"{self.command} {self.path}")
                    time.sleep(5 * TIMEOUT_S)  # the client gives up first
                    return
                self.send_response(recode(self.command, self.path) or answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if cut(self.command, self.path) or stall(self.command, self.path):
                    proxy.cut.append(f"{self.command} {self.path}")
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    if stall(self.command, self.path):
                        time.sleep(5 * BOUND_S)  # the client gives up first
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if trickle(self.command, self.path):
                    for start in range(0, len(data), 2**18):
                        self.wfile.write(data[start : start + 2**18])
                        self.wfile.flush()
                        time.sleep(TRICKLE_S)
                    return
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def bucket_entries(fs, root: str) -> list[dict]:
    """Every action-cache entry under gs://ROOT."""
    fs.invalidate_cache()
    return [json.loads(fs.cat_file(path)) for path in fs.find(f"{root}/ac")]


def bucket_problems(fs, root: str) -> list[str]:
    """Every entry's files exist and match their BLAKE3 digests (read straight from GCS)."""
    problems = []
    for entry in bucket_entries(fs, root):
        key = entry["key"]
        for item in entry["files"]:
            path = f"{root}/{layout.output(key)}/{item['path']}"
            try:
                data = fs.cat_file(path)
            except FileNotFoundError:
                problems.append(f"{key}: {item['path']} is missing")
                continue
            if len(data) != item["size"] or blake3.blake3(data).hexdigest() != item["blake3"]:
                problems.append(f"{key}: {item['path']} is partial or corrupt")
    return problems
