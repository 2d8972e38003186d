"""The guarded HTTP client's refusals, and httpcore errors translated to httpx's.

Each refusal is both a :class:`~agentflow.core.errors.StepFailure` and an httpx exception:

* an SDK handed the guarded client (OpenAI's, Anthropic's ``http_client=``) catches httpx
  errors, so it reports a refusal as the connection error it is (``BlockedDestination`` is
  an ``httpx.ConnectError``: no connection was made) instead of crashing on a foreign type;
* our own code, and the step runner for a tool that lets it escape, sees a structured
  failure with a stable code and the right retry decision: a blocked destination or an
  oversized answer does not get better on retry, so those are not retryable.

``StepFailure`` comes first in the bases: its ``__init__`` takes the code and passes the
message along ``super()``, which then reaches httpx's ``(message, *, request=None)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpcore
import httpx

from agentflow.core.errors import StepFailure

ALLOW_VARIABLE = "AGENTFLOW_HTTP_ALLOW"


class BlockedDestination(StepFailure, httpx.ConnectError):
    """The guarded client refused to connect (code ``destination_blocked``, not retryable).

    Args:
        message: which host, which address and why, and how to open it if intended.
        details: ``host``, ``port``, ``address``, ``reason`` as known.
        request: the request refused, when known.
    """

    def __init__(
        self, message: str, *, details: dict[str, Any], request: httpx.Request | None = None
    ) -> None:
        super().__init__(
            "destination_blocked",
            message,
            retryable=False,
            details=details,
            solution=(
                f"If this destination is intended, add it to {ALLOW_VARIABLE} "
                "(comma-separated hosts, IP addresses or CIDR ranges); otherwise fix the URL."
            ),
        )
        if request is not None:
            self.request = request


def origin_of(url: httpx.URL) -> str:
    """``scheme://host:port`` of ``url``: what errors may show.

    Paths and queries stay out of messages because they often are the secret (a Slack
    webhook's path, a ``?token=``), and error messages end up in logs and the console.
    """
    port = f":{url.port}" if url.port is not None else ""
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{url.scheme}://{host}{port}"


class ResponseTooLarge(StepFailure, httpx.ReadError):
    """The response body passed the size limit (code ``response_too_large``, not retryable)."""

    def __init__(self, url: httpx.URL, limit: int, *, request: httpx.Request | None = None) -> None:
        origin = origin_of(url)
        super().__init__(
            "response_too_large",
            f"the response from {origin} is larger than the {limit} byte limit; reading stopped",
            retryable=False,
            details={"origin": origin, "limit": limit},
            solution="Ask the server for less (a page, a filter) or raise the client's max_response_bytes.",
        )
        if request is not None:
            self.request = request


class RequestDeadlineExceeded(StepFailure, httpx.TimeoutException):
    """The whole exchange, redirects and body included, took longer than the client's timeout
    (code ``http_timeout``, retryable)."""

    def __init__(self, url: httpx.URL, timeout: float, *, request: httpx.Request | None = None) -> None:
        origin = origin_of(url)
        super().__init__(
            "http_timeout",
            f"the request to {origin} did not complete within {timeout:g}s",
            retryable=True,
            details={"origin": origin, "timeout": timeout},
            solution="Retry later, or raise the client's timeout if the server is known to be slow.",
        )
        if request is not None:
            self.request = request


# httpcore's exceptions and the httpx exceptions callers expect, most specific first.
_TRANSLATIONS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def httpx_errors(request: httpx.Request) -> Iterator[None]:
    """Re-raise httpcore's exceptions as the httpx ones SDKs and callers catch.

    httpx does this inside its own transport; the guarded transport drives httpcore itself
    (to give it a checking network backend), so it translates the same way.
    """
    try:
        yield
    except httpcore.ProxyError as exc:  # no proxies here, but keep the mapping complete
        raise httpx.ProxyError(str(exc), request=request) from exc
    except Exception as exc:
        for source, target in _TRANSLATIONS:
            if isinstance(exc, source):
                raise target(str(exc), request=request) from exc
        raise
