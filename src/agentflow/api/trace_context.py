"""Requests join their caller's trace, and the runs they start join it too.

While traces are on (``AGENTFLOW_TRACES``), each API request is a server span named after its
route, under the caller's span when the request carries a W3C ``traceparent``; a run the request
starts records that span (``runs.trace_parent``), so the run's spans, on whichever worker, sit
under it. While traces are off, a request's ``traceparent`` is still made current, so the runs
it starts join the caller's trace when the workers trace. Health checks and metrics scrapes
have no span. A header that cannot be read is ignored: tracing never refuses a request.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context, propagate
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentflow.runtime import tracing

_HEADERS = (b"traceparent", b"tracestate")
_UNTRACED = ("/healthz", "/metrics")


class TraceContext:
    """ASGI middleware: the request's span (or its caller's) is current while it is handled."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle the request inside its span, or its caller's span context."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers", ())
            if name in _HEADERS
        }
        parent = propagate.extract(carrier) if "traceparent" in carrier else None
        if tracing.enabled() and not str(scope.get("path", "")).startswith(_UNTRACED):
            await self._traced(scope, receive, send, parent)
        elif parent is not None:
            token = context.attach(parent)
            try:
                await self.app(scope, receive, send)
            finally:
                context.detach(token)
        else:
            await self.app(scope, receive, send)

    async def _traced(self, scope: Scope, receive: Receive, send: Send, parent: Any) -> None:
        status: list[int] = []

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        method = str(scope.get("method", "GET"))
        with tracing.server_span(method, str(scope.get("path", "")), parent) as span:
            try:
                await self.app(scope, receive, sending)
            finally:
                route = getattr(scope.get("route"), "path", None)
                tracing.end_request(span, method, route, status[0] if status else None)
