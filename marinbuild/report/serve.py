"""`marinbuild serve`: the report on localhost, regenerated while a build runs.

The pages are the static report's, written into a directory and served from it; a
request for a page regenerates the whole report first when the last one is older than
the refresh interval, and the pages reload themselves at that interval. One request at a
time (a regeneration reads the store; two at once would only do it twice).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from http.server import HTTPServer, SimpleHTTPRequestHandler
from pathlib import Path

from marinbuild.errors import MarinbuildError
from marinbuild.report.collect import collect
from marinbuild.report.pages import write
from marinbuild.session import Session


class ReportServer(HTTPServer):
    def __init__(
        self,
        address: tuple[str, int],
        open_session: Callable[[], Session],
        patterns: Sequence[str],
        out: Path,
        refresh_s: int,
    ):
        self.open_session = open_session  # a new session each time: BUILD files may have changed
        self.patterns = list(patterns)
        self.out = out
        self.refresh_s = refresh_s
        self.generated = 0.0
        self.regenerate()
        super().__init__(address, partial(_Handler, directory=str(out)))

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"

    def regenerate(self) -> None:
        write(collect(self.open_session(), self.patterns), self.out, self.refresh_s)
        self.generated = time.monotonic()


class _Handler(SimpleHTTPRequestHandler):
    server: ReportServer

    def do_GET(self) -> None:
        if (
            self.path.split("?")[0].endswith(("/", ".html"))
            and time.monotonic() - self.server.generated >= self.server.refresh_s
        ):
            try:
                self.server.regenerate()
            except MarinbuildError as error:  # e.g. a BUILD file being edited: keep serving the last pages
                sys.stderr.write(f"marinbuild: warning: the report was not regenerated: {error}\n")
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        """Quiet: a page reloading itself every few seconds would flood the terminal."""
