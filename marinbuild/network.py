"""One TCP connect before handing an address to a client library that would retry a
refused or silent one for minutes (gcsfs for half a minute, Ray for ever): an unreachable
store or cluster is then a clear error in seconds."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

CONNECT_TIMEOUT_S = 5.0


def unreachable(endpoint: str, default_scheme: str, default_port: int) -> str | None:
    """Why `endpoint` (`host:port` or a URL) cannot be connected to; None if it can."""
    parts = urlsplit(endpoint if "://" in endpoint else f"{default_scheme}://{endpoint}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else default_port)
    except ValueError as error:  # a port that is not a number
        return str(error)
    try:
        socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        return f"cannot connect to {parts.hostname}:{port} ({error})"
    return None
