"""A folder served over HTTP on a free port of 127.0.0.1, for as long as a ``with`` block lasts.

The website's browser test reads the built site through it; the install tests use it as the local package index
that stands in for the published one.
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve ``folder`` statically; yields its base URL (``http://127.0.0.1:PORT/``)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
