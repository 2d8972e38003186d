"""What an ``http_request`` node's failed exchange becomes: a ``StepFailure`` with a stable code,
details that name the URL's origin only (paths and queries often hold secrets), whether the
step's retry policy may try again, and a solution.
"""

from __future__ import annotations

from typing import Any

import httpx

from agentflow.core.errors import StepFailure
from agentflow.core.graph.action_nodes import HttpRequestNode, is_retryable_status
from agentflow.llm.retrying import retry_after_seconds

EXCERPT_CHARS = 1000  # of a body shown in an error


def transport_failure(
    exc: Exception, node: HttpRequestNode, method: str, origin: str, limit: float | None
) -> StepFailure | None:
    """The step failure for an exception raised while sending ``method`` to ``origin`` (within
    ``limit`` seconds, when the node sets one), or None for a bug to propagate."""
    where = f"http_request node {node.id!r}: {method} {origin}"
    details: dict[str, Any] = {"node": node.id, "method": method, "origin": origin}
    if isinstance(exc, httpx.TimeoutException):  # the client's deadline, or one phase's limit
        seconds = limit or (exc.info.details.get("timeout") if isinstance(exc, StepFailure) else None)
        within = f" within {seconds:g}s" if isinstance(seconds, int | float) else " in time"
        return StepFailure(
            "http_timeout",
            f"{where} did not answer{within}",
            retryable=True,
            details={**details, "timeout": seconds},
            solution="The step is retried by its retry policy; raise the node's 'timeout' if the "
            "server is known to be slow.",
        )
    if isinstance(exc, StepFailure):  # destination_blocked, response_too_large: not retried
        info = exc.info
        return StepFailure(
            info.code, f"http_request node {node.id!r}: {info.message}", retryable=exc.retryable,
            details={**info.details, **details}, solution=info.solution,
        )  # fmt: skip
    if isinstance(exc, httpx.TooManyRedirects):
        return StepFailure(
            "http_too_many_redirects",
            f"{where} redirected too many times",
            retryable=False,
            details=details,
            solution="Point 'url' at the final address instead of one that redirects.",
        )
    if isinstance(exc, httpx.DecodingError):
        return StepFailure(
            "http_bad_response",
            f"{where} answered with a body that cannot be decoded: {exc}",
            retryable=False,
            details=details,
            solution="Check the server's Content-Encoding; ask it for an uncompressed or gzip body.",
        )
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return StepFailure(
            "http_url_invalid",
            f"http_request node {node.id!r}: the URL is not usable: {exc}",
            retryable=False,
            details={"node": node.id, "field": "url"},
            solution="Make 'url' render to a full http or https URL, e.g. https://api.example.com/v1/items.",
        )
    if isinstance(exc, httpx.ConnectError):
        return StepFailure(
            "http_connect_failed",
            f"{where}: could not connect: {exc}",
            retryable=True,
            details=details,
            solution="The step is retried by its retry policy; check that the host is right and up.",
        )
    if isinstance(exc, httpx.HTTPError):
        return StepFailure(
            "http_failed",
            f"{where} failed: {type(exc).__name__}: {exc}",
            retryable=True,
            details=details,
            solution="The step is retried by its retry policy; check the server if it keeps failing.",
        )
    return None


def status_failure(node: HttpRequestNode, method: str, origin: str, response: httpx.Response) -> StepFailure:
    """The step failure for an answer whose status the node does not accept (``http_status``),
    retryable when the status is (429, 5xx), with the server's ``Retry-After``."""
    status = response.status_code
    retryable = is_retryable_status(status)
    details: dict[str, Any] = {
        "node": node.id,
        "method": method,
        "origin": origin,
        "status": status,
        "body": response_text(response)[:EXCERPT_CHARS],
    }
    wait = retry_after_seconds(response.headers) if retryable else None
    if wait is not None:
        details["retry_after"] = wait  # seconds the server asked for (see the report on retries)
    if status == 429:
        solution = (
            "The server is rate limiting: the step is retried by its retry policy; give it a "
            "longer 'retry.initial_delay', or send fewer requests."
        )
    elif retryable:
        solution = "The step is retried by its retry policy; check the server if it keeps failing."
    else:
        solution = (
            "Check the request (URL, headers, body) against the API. If this status is an answer "
            "the workflow handles, add it to 'expect', or connect the node's 'error' port."
        )
    reason = f" {response.reason_phrase}" if response.reason_phrase else ""
    return StepFailure(
        "http_status",
        f"http_request node {node.id!r}: {method} {origin} answered {status}{reason}",
        retryable=retryable,
        details=details,
        solution=solution,
    )


def response_text(response: httpx.Response) -> str:
    """The body as text (NUL characters replaced: the database stores no NUL in text)."""
    return response.text.replace("\0", "\ufffd")
