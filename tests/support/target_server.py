"""A real HTTP server that records every request and answers as scripted: the target of outbound calls.

It listens on a loopback address (``127.0.0.1`` by default; ``127.0.0.2`` and ``::1`` work
too) in a daemon thread. Every request of any method is recorded (method, path, headers,
body); a path's answer can be scripted with :class:`Reply` (status, headers, body, a delay,
a slow drip of the body). Unscripted paths answer 200 ``ok``.

Example:
    >>> with TargetServer() as server:  # doctest: +SKIP
    ...     server.route("/moved", Reply(302, headers={"Location": "http://127.0.0.1:9/"}))
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass(frozen=True)
class Reply:
    """A scripted answer.

    Attributes:
        status: the HTTP status.
        headers: extra response headers.
        body: the body (Content-Length is set unless ``drip`` is used).
        delay: seconds to wait before answering.
        drip: send the body one byte at a time, this many seconds apart (no Content-Length).
        length: send Content-Length; False ends the body by closing the connection instead.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    delay: float = 0.0
    drip: float = 0.0
    length: bool = True


@dataclass(frozen=True)
class Received:
    """One request as received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


class _Server6(_Server):
    address_family = socket.AF_INET6


class TargetServer:
    """A thread-safe scripted HTTP server; use it as a context manager.

    Args:
        host: the loopback address to listen on.
        port: 0 for a free port, or a given one (to listen on the same port as another
            server on another address).
        tls: serve HTTPS with this server-side context.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None) -> None:
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._routes: dict[str, Reply] = {}
        self._tls = tls is not None
        server_class = _Server6 if ":" in host else _Server
        self._httpd = server_class((host, port), self._handler_class())
        if tls is not None:
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="target", daemon=True
        )

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://host:port`` (no trailing slash; ``https`` with TLS)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "https" if self._tls else "http"
        return f"{scheme}://{host}:{self.port}"

    def route(self, path: str, reply: Reply) -> None:
        """Answer requests for ``path`` with ``reply``."""
        with self._lock:
            self._routes[path] = reply

    @property
    def received(self) -> list[Received]:
        """Every request so far, in arrival order."""
        with self._lock:
            return list(self._received)

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        path = handler.path
        with self._lock:
            self._received.append(Received(handler.command, path, dict(handler.headers.items()), body))
            reply = self._routes.get(path.split("?")[0], Reply())
        if reply.delay:
            time.sleep(reply.delay)
        try:
            handler.send_response(reply.status)
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            if reply.drip or not reply.length:
                handler.send_header("Connection", "close")
                handler.end_headers()
                step = 1 if reply.drip else len(reply.body) or 1
                for index in range(0, len(reply.body), step):
                    handler.wfile.write(reply.body[index : index + step])
                    handler.wfile.flush()
                    time.sleep(reply.drip)
                return
            handler.send_header("Content-Length", str(len(reply.body)))
            handler.end_headers()
            if handler.command != "HEAD":
                handler.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a size or time limit): nothing to answer

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

            def do_HEAD(self) -> None:
                server._serve(self)

            def log_message(self, format: str, *args: Any) -> None:  # silence per-request logs
                return

        return Handler
