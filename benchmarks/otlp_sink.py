"""A stand-in OTLP/HTTP collector for measuring what tracing costs (issue 16).

It accepts ``POST /v1/traces`` (protobuf or JSON), answers 200 at once and counts what it got;
SIGTERM or Ctrl-C prints the totals. Run it, then the benchmark with tracing on::

    python benchmarks/otlp_sink.py --port 4318 &
    AGENTFLOW_TRACES=otlp OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 agentflow bench -w W1,W2
"""

from __future__ import annotations

import argparse
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

received = {"requests": 0, "bytes": 0}


class Sink(BaseHTTPRequestHandler):
    """Takes every export, keeps only its size."""

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        received["requests"] += 1
        received["bytes"] += length
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: one line per export would cost more than the export."""


def main() -> None:
    """Serve until interrupted, then print what arrived."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=4318)
    port = parser.parse_args().port
    server = ThreadingHTTPServer(("127.0.0.1", port), Sink)
    for stop in (signal.SIGTERM, signal.SIGINT):  # a background job ignores Ctrl-C's SIGINT
        signal.signal(stop, lambda *_: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever()
    finally:
        server.server_close()
        print(f"{received['requests']} exports, {received['bytes']} bytes")


if __name__ == "__main__":
    main()
