"""A real HTTP server that records every POST: the stand-in for an external system.

It listens on 127.0.0.1 (a free port) in a daemon thread and, for each POST, records the
path, the ``Idempotency-Key`` header, the JSON body and the moment it arrived
(``time.monotonic()`` of the test process, one clock for every worker process). Three
kinds of receivers sit behind it:

* every path counts raw calls;
* a call carrying an ``Idempotency-Key`` applies its effect at most once per
  (path, key): the first call applies, repeats are acknowledged and dropped, the way a
  well-behaved payment API treats retries;
* a path under ``/fenced/`` also takes ``fencing_token`` from the body and rejects (409) a
  write whose token is lower than the highest one already accepted for its key, the way
  a storage system that honours fencing tokens treats a stale lease holder.

Example:
    >>> with RecordingServer() as server:  # doctest: +SKIP
    ...     os.environ["AGENTFLOW_TEST_RECORDER"] = server.url
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # the default backlog (5) resets bursts of concurrent callers


@dataclass(frozen=True)
class Call:
    """One POST as received.

    Attributes:
        path: the request path, e.g. ``/keyed``.
        key: the ``Idempotency-Key`` header, or None.
        body: the decoded JSON body (``{}`` when empty).
        at: ``time.monotonic()`` in the server's process when the request arrived.
        applied: whether this call's effect was applied (False for a deduplicated
            repeat or a rejected stale write).
        status: the HTTP status the server answered.
        aborted: the body was cut off (the caller died while sending): the request was
            not processed, like any HTTP server treats a short body.
    """

    path: str
    key: str | None
    body: dict[str, Any]
    at: float
    applied: bool
    status: int
    aborted: bool = False


class RecordingServer:
    """A thread-safe recording HTTP server; use it as a context manager."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[Call] = []
        self._applied: dict[tuple[str, str], dict[str, Any]] = {}
        self._fence: dict[str, int] = {}
        self._httpd = _Server(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="recorder", daemon=True)

    # Lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (no trailing slash)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    # What was recorded -----------------------------------------------------------------

    def calls(self, path: str | None = None) -> list[Call]:
        """Every complete call (to ``path`` only, when given), in arrival order."""
        with self._lock:
            return [c for c in self._calls if (path is None or c.path == path) and not c.aborted]

    def aborted(self) -> list[Call]:
        """Requests whose body was cut off: never processed, no effect."""
        with self._lock:
            return [c for c in self._calls if c.aborted]

    def raw_counts(self, path: str, field: str = "run_id") -> Counter[str]:
        """Raw calls to ``path`` per value of body ``field``."""
        return Counter(str(c.body.get(field)) for c in self.calls(path))

    def applied(self, path: str) -> dict[str, dict[str, Any]]:
        """Keyed effects applied on ``path``: key -> body of the call that applied it."""
        with self._lock:
            return {key: body for (p, key), body in self._applied.items() if p == path}

    def wait_for(self, predicate: Any, timeout: float) -> bool:
        """Poll ``predicate(self)`` until true or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            time.sleep(0.01)
        return bool(predicate(self))

    # Serving ---------------------------------------------------------------------------

    def _record(self, path: str, key: str | None, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        at = time.monotonic()
        with self._lock:
            status, applied = 200, True
            if path.startswith("/fenced/"):
                if key is None or not isinstance(body.get("fencing_token"), int):
                    status, applied = 400, False
                elif body["fencing_token"] < self._fence.get(key, -1):
                    status, applied = 409, False
                else:
                    self._fence[key] = body["fencing_token"]
            elif key is not None:
                applied = (path, key) not in self._applied
                if applied:
                    self._applied[(path, key)] = body
            self._calls.append(Call(path, key, body, at, applied, status))
            calls = sum(1 for c in self._calls if c.path == path and c.key == key and not c.aborted)
        return status, {"applied": applied, "calls": calls}

    def _abort(self, path: str, key: str | None) -> None:
        with self._lock:
            self._calls.append(Call(path, key, {}, time.monotonic(), False, 400, aborted=True))

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if len(raw) < length:
                    server._abort(self.path, self.headers.get("Idempotency-Key"))
                    self.close_connection = True
                    return
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                if not isinstance(body, dict):
                    body = {"_value": body}
                status, answer = server._record(self.path, self.headers.get("Idempotency-Key"), body)
                data = json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    # The caller died after sending (a killed worker): the call is recorded
                    # and its effect applied; only the answer is lost.
                    pass

            def log_message(self, format: str, *args: Any) -> None:  # silence per-request logs
                return

        return Handler
