"""ASGI middleware that guards the app: URL text, body limits and strict JSON, and a last-resort 500.

``BodyGuard`` first refuses a path or query string that holds the NUL character (PostgreSQL
text cannot) or is not UTF-8 once percent-decoded, so no route has to. It then reads each
request body itself, capped at ``MAX_BODY_BYTES`` (checking ``Content-Length`` first and
then the bytes actually received) and within ``BODY_TIMEOUT_SECONDS``, refuses a body that
does not say it is JSON (``Content-Type: application/json``: a web page cannot send that
without a CORS preflight) and JSON that :mod:`agentflow.api.strict_json` rejects, and only
then hands the body to the routes. ``CatchAll`` turns an unexpected exception into a bare
500 ``internal_error`` (the traceback goes to the log, never to the client), and a database
outage that reached it into a 503 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from email.message import Message as MimeMessage
from urllib.parse import parse_qsl, unquote_to_bytes

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

BODY_TIMEOUT_SECONDS = 30.0
"""The longest a client may take to send a whole body; a stalled one gets 408 ``body_timeout``."""

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

FORM = "application/x-www-form-urlencoded"
FORM_PATHS = frozenset({"/api/public/slack/interactions"})
"""The only routes that take a form body (from a sender that cannot send JSON, and that
authenticate it themselves): Slack's interaction callbacks, signed with the signing secret."""
MAIL = "message/rfc822"
MAIL_PATHS = frozenset({"/api/public/inbound/email"})
"""The only route that takes a raw email: replies to requests, authenticated by the token in
the reply address they were sent to."""

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
    """Refuse unstorable URLs, and oversized, stalled, non-JSON and unstorable bodies, before
    any route sees them.

    Args:
        app: the wrapped ASGI app.
        max_bytes: the body size limit.
        timeout: seconds the whole body may take to arrive.
    """

    def __init__(
        self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES, timeout: float = BODY_TIMEOUT_SECONDS
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the URL and the body of an HTTP request, then pass it on with the body replayed."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = check_url(scope)
        if refused is not None:
            await error_response(400, refused)(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, receive, send, received=0)
            return
        body = bytearray()
        more: object = False
        try:
            async with asyncio.timeout(self.timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return  # the client left; nobody to answer
                    body += message.get("body", b"")
                    more = message.get("more_body", False)
                    if len(body) > self.max_bytes or not more:
                        break
        except TimeoutError:
            info = ErrorInfo(
                "body_timeout",
                f"the request body did not arrive within {self.timeout:g} seconds",
                solution="Send the whole body at once, with a correct Content-Length.",
            )
            await error_response(408, info, {"Connection": "close"})(scope, receive, send)
            return
        if len(body) > self.max_bytes:
            await self._too_large(scope, receive, send, received=len(body), more=more)
            return
        content_type = headers.get("content-type")
        if scope["path"] in FORM_PATHS and content_type == FORM:
            # Slack posts its interactions as a form; the route checks their signature.
            await self.app(scope, _replay(bytes(body), receive), send)
            return
        if scope["path"] in MAIL_PATHS and (content_type or "").split(";")[0].strip().lower() == MAIL:
            await self.app(scope, _replay(bytes(body), receive), send)
            return
        typed = content_type is not None and scope["method"] not in SAFE_METHODS
        # No Content-Type is refused too: it is what a page's fetch() sends without a CORS
        # preflight, and the server would otherwise act on the body as JSON.
        if (body or typed) and (content_type is None or not _is_json(content_type)):
            said = "no Content-Type" if content_type is None else f"Content-Type {content_type[:100]!r}"
            info = ErrorInfo(
                "unsupported_media_type",
                f"the request body must be JSON, sent with Content-Type: application/json ({said})",
                solution="Send 'Content-Type: application/json' with a JSON body.",
            )
            await error_response(415, info)(scope, receive, send)
            return
        if body:
            try:
                await _check_json(bytes(body))
            except strict_json.JsonRejected as exc:
                details = {"path": exc.path} if exc.path is not None else None
                info = ErrorInfo(exc.code, exc.message, details or {}, "Correct the request body.")
                await error_response(400, info)(scope, receive, send)
                return
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


def check_url(scope: Scope) -> ErrorInfo | None:
    """Why the path or query string of ``scope`` cannot be served, or None.

    Both are percent-decoded exactly as the router and the query parser will: a NUL
    character (``%00``) is ``unstorable_text``, bytes that are not UTF-8 (``%ff``) are
    ``invalid_utf8`` (the parsers would silently turn them into U+FFFD).
    """
    raw_path: bytes | None = scope.get("raw_path")
    path = (
        unquote_to_bytes(raw_path.split(b"?", 1)[0])
        if raw_path
        else scope["path"].encode("utf-8", "surrogatepass")
    )
    problem = _text_problem(path, "the URL path")
    if problem is not None:
        return problem
    query: bytes = scope.get("query_string", b"")
    if not query:
        return None
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True, encoding="latin-1"):
        label = name.encode("latin-1").decode("utf-8", "replace")[:60]
        for part in (name, value):
            problem = _text_problem(part.encode("latin-1"), f"the query parameter {label!r}")
            if problem is not None:
                return problem
    return None


def _text_problem(raw: bytes, where: str) -> ErrorInfo | None:
    if b"\x00" in raw:
        return ErrorInfo(
            "unstorable_text",
            f"{where} holds the NUL character (%00), which cannot be stored",
            solution="Remove the NUL character from the URL.",
        )
    try:
        raw.decode("utf-8")  # strict: refuses encoded surrogates (%ed%a0%80) too
    except UnicodeDecodeError as exc:
        return ErrorInfo(
            "invalid_utf8",
            f"{where} is not UTF-8 once percent-decoded (byte {exc.start})",
            solution="Percent-encode the UTF-8 bytes of the text (é is %C3%A9).",
        )
    return None


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
