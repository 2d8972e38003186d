"""The one outbound HTTP client for every workspace-controlled URL.

``guarded_client()`` returns a plain ``httpx.AsyncClient``, so it can be handed to SDKs
(``openai.AsyncOpenAI(http_client=...)``, ``anthropic.AsyncAnthropic(http_client=...)``),
whose every request then passes the same checks.

Where the checks sit, and why there:

* The transport refuses schemes other than http/https and bounds each exchange (total
  deadline, decoded body size). httpx sends every redirect hop through the transport, and
  the deadline travels in the request's extensions, which httpx copies onto each hop, so
  redirects are re-checked and share one deadline.
* The *network backend* under httpcore's connection pool is the only code that opens
  sockets. It resolves the host once through the guard, refuses the connection if any
  answer is not public (unless the allow-list opens it), and connects to the checked
  address itself, never to the name: no second lookup, so DNS rebinding has nothing to
  rebind. The pool still knows the connection by its URL host, so the Host header, TLS SNI
  and certificate verification all use the original host name, and a kept-alive
  connection is only reused for the host it was verified for.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterable, Iterable, Mapping, Sequence
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpcore
import httpx
from opentelemetry import propagate

from agentflow.integrations.allow_list import AllowList
from agentflow.integrations.bound_auth import CREDENTIAL_EXTENSION, BoundAuth
from agentflow.integrations.destinations import (
    DestinationGuard,
    ResolutionFailed,
    Resolver,
    resolve_with_system,
)
from agentflow.integrations.http_errors import BlockedDestination, RequestDeadlineExceeded, httpx_errors
from agentflow.integrations.response_limits import (
    ACCEPT_ENCODING,
    BoundedBody,
    check_declared_size,
    decoder_for,
)

MiB = 1024 * 1024
DEADLINE_EXTENSION = "agentflow.deadline"  # request extension: loop time the exchange must end by


def guarded_client(
    *,
    allow: Sequence[str] = (),
    resolver: Resolver | None = None,
    timeout: float = 30.0,
    max_response_bytes: int = 10 * MiB,
    max_redirects: int = 5,
    headers: Mapping[str, str] | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> httpx.AsyncClient:
    """Build the guarded client; close it (``aclose`` or ``async with``) when done.

    Args:
        allow: allow-list entries that open non-public destinations (hosts, IPs, CIDR
            ranges, optionally ``:port``), e.g. ``settings.http_allow_list``.
        resolver: ``async (host, port) -> [ip, ...]``; the system resolver by default.
        timeout: seconds for the whole exchange of one request, from the first connection
            through every redirect to the last body byte.
        max_response_bytes: the most (decoded) body bytes one response may have.
        max_redirects: redirects followed before ``httpx.TooManyRedirects``.
        headers: default headers of every request.
        ssl_context: certificates to trust (a private CA); httpx's defaults otherwise.

    Returns:
        An ``httpx.AsyncClient`` that follows redirects and refuses blocked destinations
        with :class:`BlockedDestination`.

    Raises:
        ConfigError: code ``http_allow_invalid`` for an allow-list entry that cannot be read.
    """
    guard = DestinationGuard(AllowList(allow), resolver or resolve_with_system)
    transport = GuardedTransport(
        guard, timeout=timeout, max_response_bytes=max_response_bytes, ssl_context=ssl_context
    )
    return httpx.AsyncClient(
        transport=transport,
        timeout=httpx.Timeout(timeout),
        follow_redirects=True,
        max_redirects=max_redirects,
        headers=headers,
        # No proxies, .netrc or SSL_* variables from the environment: the guard decides alone.
        trust_env=False,
        # One client serves every workspace: a cookie one call receives must never ride on
        # another's request, so none is kept (responses still show their Set-Cookie).
        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
    )


class CheckedBackend(httpcore.AsyncNetworkBackend):
    """A network backend that only ever connects to addresses the guard has checked.

    Args:
        guard: resolves once and refuses blocked destinations.
        inner: the backend that opens the sockets (anyio's by default).
    """

    def __init__(self, guard: DestinationGuard, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._guard = guard
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Check ``host`` (once), then connect to the first checked address that answers."""
        try:
            async with asyncio.timeout(timeout):
                addresses = await self._guard.check(host, port)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"resolving {host!r} took longer than {timeout}s") from None
        except ResolutionFailed as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        options = list(socket_options or ())
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout=timeout, local_address=local_address, socket_options=options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # the guard never returns an empty list
        raise failure

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        """Refused: a Unix socket is a local destination the allow-list cannot express."""
        raise BlockedDestination(
            f"refused to connect to the Unix socket {path!r}",
            details={"host": path, "reason": "Unix sockets are local"},
        )

    async def sleep(self, seconds: float) -> None:
        """Sleep (httpcore's connection retries)."""
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncBaseTransport):
    """httpx transport over an httpcore pool whose sockets come from :class:`CheckedBackend`.

    Args:
        guard: the destination guard.
        timeout: total seconds per exchange (redirects included).
        max_response_bytes: the decoded body limit.
        ssl_context: certificates to trust; httpx's defaults otherwise.
        limits: connection pool limits.
    """

    def __init__(
        self,
        guard: DestinationGuard,
        *,
        timeout: float,
        max_response_bytes: int,
        ssl_context: ssl.SSLContext | None = None,
        limits: httpx.Limits = httpx.Limits(),  # noqa: B008 - immutable value object
    ) -> None:
        self._timeout = timeout
        self._max_bytes = max_response_bytes
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=CheckedBackend(guard),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send one hop: refuse a bad scheme, add a credential bound to the hop's origin (see
        ``bound_auth``), bound the exchange, bound the body."""
        if request.url.scheme not in ("http", "https"):
            raise BlockedDestination(
                f"refused a {request.url.scheme!r} URL: only http and https are allowed",
                details={"scheme": request.url.scheme, "reason": "scheme not allowed"},
                request=request,
            )
        loop = asyncio.get_running_loop()
        # The first hop fixes the deadline; redirect hops carry the same extensions.
        deadline = float(request.extensions.setdefault(DEADLINE_EXTENSION, loop.time() + self._timeout))
        url, headers = request.url, request.headers
        bound = request.extensions.get(CREDENTIAL_EXTENSION)
        if isinstance(bound, BoundAuth) and bound.applies_to(url):  # only hops to its own origin
            url, headers = bound.apply(url, headers)
        headers = _with_trace_context(headers)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=_bounded_accept_encoding(headers),
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            async with asyncio.timeout_at(deadline):
                with httpx_errors(request):
                    core_response = await self._pool.handle_async_request(core_request)
        except TimeoutError:
            raise RequestDeadlineExceeded(request.url, self._timeout, request=request) from None
        headers = httpx.Headers(core_response.headers)
        try:
            check_declared_size(headers, request, self._max_bytes)
            decoder = decoder_for(headers, request)
        except httpx.HTTPError:
            await core_response.aclose()
            raise
        if decoder is not None:
            # The body reaches httpx already decoded; its own decoder must not run again.
            del headers["content-encoding"]
            headers.pop("content-length", None)
        assert isinstance(core_response.stream, AsyncIterable)  # an async pool streams async
        body = BoundedBody(
            core_response.stream,
            request=request,
            limit=self._max_bytes,
            deadline=deadline,
            timeout=self._timeout,
            decoder=decoder,
        )
        return httpx.Response(
            status_code=core_response.status,
            headers=headers,
            stream=body,
            extensions=core_response.extensions,
        )

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await self._pool.aclose()


def _bounded_accept_encoding(headers: httpx.Headers) -> list[tuple[bytes, bytes]]:
    """The request headers, asking only for encodings whose output the body reader can bound."""
    if "accept-encoding" not in headers:
        return headers.raw
    wanted = headers["accept-encoding"].strip().lower()
    rewritten = headers.copy()
    rewritten["accept-encoding"] = "identity" if wanted == "identity" else ACCEPT_ENCODING
    return rewritten.raw


def _with_trace_context(headers: httpx.Headers) -> httpx.Headers:
    """``headers`` with the current span's ``traceparent`` (when a step traces and the caller
    did not set one), so the receiving service's spans join the run's trace."""
    if "traceparent" in headers:
        return headers
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if not carrier:
        return headers
    headers = headers.copy()
    headers.update(carrier)
    return headers
