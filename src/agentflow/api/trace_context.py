"""Requests that carry a W3C ``traceparent`` start their runs inside the caller's trace.

The middleware makes the header's span context current while the request is handled, so a
run it starts records it (``runs.trace_parent``) and the run's spans, on whichever worker,
join the caller's trace (``runtime.tracing``). A request without the header, or with one that
cannot be read, is handled as it is: tracing never refuses a request.
"""

from __future__ import annotations

from opentelemetry import context, propagate
from starlette.types import ASGIApp, Receive, Scope, Send

_HEADERS = (b"traceparent", b"tracestate")


class TraceContext:
    """ASGI middleware: the request's ``traceparent`` is the current span context."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle the request inside its caller's span context, when it names one."""
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers", ())
            if name in _HEADERS
        }
        if scope["type"] != "http" or "traceparent" not in carrier:
            await self.app(scope, receive, send)
            return
        token = context.attach(propagate.extract(carrier))
        try:
            await self.app(scope, receive, send)
        finally:
            context.detach(token)
