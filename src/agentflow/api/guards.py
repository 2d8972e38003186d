"""ASGI middleware that guards the app: body limits and strict JSON, and a last-resort 500.

``BodyGuard`` reads each request body itself, capped at ``MAX_BODY_BYTES`` (checking
``Content-Length`` first and then the bytes actually received), refuses non-JSON bodies
and JSON that :mod:`agentflow.api.strict_json` rejects, and only then hands the body to
the routes. ``CatchAll`` turns an unexpected exception into a bare 500 ``internal_error``
(the traceback goes to the log, never to the client), and a database outage that reached it
into a 503 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from email.message import Message as MimeMessage

from prometheus_client import Counter
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentflow.api import strict_json
from agentflow.api.errors import error_response, unavailable_response
from agentflow.core.errors import ErrorInfo
from agentflow.runtime.metrics import REGISTRY
from agentflow.store.database import unavailable

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024
"""The largest request body accepted (1 MiB)."""

THREAD_ABOVE_BYTES = 64 * 1024
"""Bodies larger than this are parsed in a worker thread."""

DRAIN_BYTES = 32 * 1024 * 1024
DRAIN_SECONDS = 10.0
"""How much of an oversized body is read and discarded before answering 413.

A client still sending when the server closes the connection sees a reset instead of the
413; reading the rest first (within these bounds) lets it see the answer.
"""

INTERNAL_ERRORS = Counter(
    "agentflow_http_internal_errors",
    "Requests that ended in an unexpected exception (HTTP 500)",
    registry=REGISTRY,
)


class BodyGuard:
    """Refuse oversized, non-JSON and unstorable bodies before any route sees them.

    Args:
        app: the wrapped ASGI app.
        max_bytes: the body size limit.
    """

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the body of an HTTP request, then pass the request on with the body replayed."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, receive, send, received=0)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left; nobody to answer
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._too_large(scope, receive, send, received=len(body), more=message.get("more_body"))
                return
            if not message.get("more_body", False):
                break
        if body:
            content_type = headers.get("content-type")
            if content_type is not None and not _is_json(content_type):
                message_text = f"send JSON (Content-Type: application/json), not {content_type[:100]!r}"
                await self._refuse(scope, receive, send, 415, "unsupported_media_type", message_text)
                return
            try:
                await _check_json(bytes(body))
            except strict_json.JsonRejected as exc:
                details = {"path": exc.path} if exc.path is not None else None
                info = ErrorInfo(exc.code, exc.message, details or {}, "Correct the request body.")
                await error_response(400, info)(scope, receive, send)
                return
            if content_type is None:
                scope = {**scope, "headers": [*scope["headers"], (b"content-type", b"application/json")]}
        await self.app(scope, _replay(bytes(body), receive), send)

    async def _too_large(
        self, scope: Scope, receive: Receive, send: Send, *, received: int, more: object = True
    ) -> None:
        if more:
            await _drain(receive, DRAIN_BYTES - received, DRAIN_SECONDS)
        info = ErrorInfo(
            "body_too_large",
            f"the request body is larger than {self.max_bytes} bytes",
            solution="Send a smaller body.",
        )
        await error_response(413, info, {"Connection": "close"})(scope, receive, send)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str
    ) -> None:
        await error_response(status, ErrorInfo(code, message))(scope, receive, send)


async def _drain(receive: Receive, budget: int, seconds: float) -> None:
    """Read and discard the rest of a body, up to ``budget`` bytes and ``seconds``."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            while budget > 0:
                message = await receive()
                if message["type"] != "http.request":
                    return
                budget -= len(message.get("body", b""))
                if not message.get("more_body", False):
                    return


async def _check_json(body: bytes) -> None:
    """Parse strictly; a large body is checked in a thread so the event loop keeps turning."""
    if len(body) <= THREAD_ABOVE_BYTES:
        strict_json.parse(body)
    else:
        await asyncio.to_thread(strict_json.parse, body)


def _is_json(content_type: str) -> bool:
    parsed = MimeMessage()
    parsed["content-type"] = content_type
    subtype = parsed.get_content_subtype()
    return parsed.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class CatchAll:
    """The last resort: log an unexpected exception and answer 500 ``internal_error``.

    Args:
        app: the wrapped ASGI app.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app; on an exception before the response started, send a bare 500."""
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if scope["type"] != "http":
                raise
            if unavailable(exc) and not started:
                # An outage that escaped the routes' handlers (raised in a middleware or a
                # handler of its own) is still an outage: 503 with Retry-After, never a 500.
                logger.warning(
                    "database unavailable during %s %s: %r", scope.get("method"), scope.get("path"), exc
                )
                await unavailable_response()(scope, receive, send)
                return
            INTERNAL_ERRORS.inc()
            logger.exception("unexpected error in %s %s", scope.get("method"), scope.get("path"))
            if started:
                raise  # too late for a response: let the server drop the connection
            info = ErrorInfo("internal_error", "an unexpected error occurred; it has been logged")
            await error_response(500, info)(scope, receive, send)
