"""A real HTTP server whose answers to a path follow a script: the target of ``http_request`` nodes.

Like :class:`tests.support.target_server.TargetServer` (and with its :class:`Reply`), but a
path can be given several replies, served in order, the last one repeated: "503, then 201"
proves a retry. Every method is served; every request is recorded with its query parsed.

Example:
    >>> with ScriptedServer() as server:  # doctest: +SKIP
    ...     server.script("/orders", Reply(503), Reply(201, body=b'{"id": 7}'))
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from tests.support.target_server import Reply


def json_reply(document: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    """A reply with a JSON body and its Content-Type (and ``headers``)."""
    return Reply(
        status,
        headers={"Content-Type": "application/json", **(headers or {})},
        body=json.dumps(document).encode(),
    )


@dataclass(frozen=True)
class Request:
    """One request as received.

    Attributes:
        method / path: as sent (``path`` without the query).
        query: the query, parsed (every value a list).
        headers: the headers, names as sent.
        body: the raw body.
        at: ``time.monotonic()`` when it arrived.
    """

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    at: float

    def header(self, name: str) -> str | None:
        """A header's value by case-insensitive name."""
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)

    def json(self) -> Any:
        return json.loads(self.body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64


class ScriptedServer:
    """A thread-safe scripted HTTP server on 127.0.0.1; use it as a context manager."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._scripts: dict[str, list[Reply]] = {}
        self._httpd = _Server(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted", daemon=True
        )

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (no trailing slash)."""
        return f"http://127.0.0.1:{self.port}"

    def script(self, path: str, *replies: Reply) -> None:
        """Answer requests for ``path`` with ``replies`` in order, then the last one again."""
        assert replies
        with self._lock:
            self._scripts[path] = list(replies)

    def requests(self, path: str | None = None) -> list[Request]:
        """Every request (to ``path`` only, when given), in arrival order."""
        with self._lock:
            return [r for r in self._requests if path is None or r.path == path]

    def _next_reply(self, path: str) -> Reply:
        with self._lock:
            script = self._scripts.get(path)
            if not script:
                return Reply(404, body=b"no such path")
            return script.pop(0) if len(script) > 1 else script[0]

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        parts = urlsplit(handler.path)
        request = Request(
            handler.command,
            parts.path,
            parse_qs(parts.query, keep_blank_values=True),
            dict(handler.headers.items()),
            body,
            time.monotonic(),
        )
        with self._lock:
            self._requests.append(request)
        reply = self._next_reply(parts.path)
        if reply.delay:
            time.sleep(reply.delay)
        try:
            handler.send_response(reply.status)
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            if not reply.length:  # the body ends when the connection closes
                handler.send_header("Connection", "close")
                handler.end_headers()
                handler.wfile.write(reply.body)
                handler.close_connection = True
                return
            handler.send_header("Content-Length", str(len(reply.body)))
            handler.end_headers()
            if handler.command != "HEAD":
                handler.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a size or time limit)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                server._serve(self)

            def do_POST(self) -> None:
                server._serve(self)

            def do_PUT(self) -> None:
                server._serve(self)

            def do_PATCH(self) -> None:
                server._serve(self)

            def do_DELETE(self) -> None:
                server._serve(self)

            def do_HEAD(self) -> None:
                server._serve(self)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler
