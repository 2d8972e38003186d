"""The guarded client for model SDKs built on ``httpx2`` (OpenAI, Anthropic, Google GenAI).

Current OpenAI, Anthropic and Google GenAI SDKs use ``httpx2``, a fork of httpx with its
own classes; Anthropic's refuses an ``httpx.AsyncClient`` outright. So SDKs get an
``httpx2.AsyncClient`` whose transport bridges every request into the same
:class:`~agentflow.integrations.guarded_http.GuardedTransport` the httpx client uses: one
implementation of the destination checks and limits, two client flavours.

The SDK's client follows redirects itself, sending each hop through the bridge, so every
hop is checked; the exchange's deadline is carried from hop to hop like in httpx.

Errors: the guard's own refusals (``BlockedDestination``, ``ResponseTooLarge``,
``RequestDeadlineExceeded``) pass through unchanged, so the SDK reports them as its
connection error with ours as ``__cause__``; httpx's transport errors become the httpx2
exceptions of the same name, which the SDKs know how to classify and retry.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Iterator, Mapping, Sequence

import httpx
import httpx2

from agentflow.core.errors import StepFailure
from agentflow.integrations.allow_list import AllowList
from agentflow.integrations.destinations import DestinationGuard, Resolver, resolve_with_system
from agentflow.integrations.guarded_http import DEADLINE_EXTENSION, GuardedTransport, MiB


def guarded_sdk_client(
    *,
    allow: Sequence[str] = (),
    resolver: Resolver | None = None,
    timeout: float = 30.0,
    max_response_bytes: int = 10 * MiB,
    max_redirects: int = 5,
    headers: Mapping[str, str] | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> httpx2.AsyncClient:
    """The guarded client as an ``httpx2.AsyncClient``, for ``http_client=`` of model SDKs.

    Takes the same arguments as :func:`~agentflow.integrations.guarded_http.guarded_client`
    and enforces the same rules.

    Raises:
        ConfigError: code ``http_allow_invalid`` for an allow-list entry that cannot be read.
    """
    guard = DestinationGuard(AllowList(allow), resolver or resolve_with_system)
    transport = GuardedTransport(
        guard, timeout=timeout, max_response_bytes=max_response_bytes, ssl_context=ssl_context
    )
    return httpx2.AsyncClient(
        transport=Httpx2Bridge(transport),
        timeout=httpx2.Timeout(timeout),
        follow_redirects=True,
        max_redirects=max_redirects,
        headers=headers,
        trust_env=False,
    )


class Httpx2Bridge(httpx2.AsyncBaseTransport):
    """An httpx2 transport that sends through a guarded httpx transport.

    Args:
        transport: the guarded transport every request goes through.
    """

    def __init__(self, transport: GuardedTransport) -> None:
        self._transport = transport

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Forward one hop and hand the (bounded) answer back as an httpx2 response."""
        if not isinstance(request.stream, httpx2.AsyncByteStream):
            raise RuntimeError("the guarded SDK client is async only")
        forwarded = httpx.Request(
            request.method,
            str(request.url),
            headers=request.headers.raw,
            stream=_ForwardedBody(request.stream),
            extensions=request.extensions,
        )
        try:
            with _httpx2_errors(request, forwarded):
                response = await self._transport.handle_async_request(forwarded)
        finally:
            # httpx copies extensions into the forwarded request; keep the deadline on the
            # SDK's request, whose extensions its client copies onto the next redirect hop.
            if DEADLINE_EXTENSION in forwarded.extensions:
                request.extensions[DEADLINE_EXTENSION] = forwarded.extensions[DEADLINE_EXTENSION]
        return httpx2.Response(
            response.status_code,
            headers=response.headers.raw,
            stream=_ReturnedBody(response, request),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        """Close the guarded transport's connections."""
        await self._transport.aclose()


class _ForwardedBody(httpx.AsyncByteStream):
    """The SDK's request body, as an httpx stream."""

    def __init__(self, body: AsyncIterable[bytes]) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._body:
            yield chunk


class _ReturnedBody(httpx2.AsyncByteStream):
    """The guarded response body, as an httpx2 stream (limits still enforced while read)."""

    def __init__(self, response: httpx.Response, request: httpx2.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx2_errors(self._request):
            async for chunk in self._response.aiter_raw():
                yield chunk

    async def aclose(self) -> None:
        await self._response.aclose()


@contextlib.contextmanager
def _httpx2_errors(request: httpx2.Request, forwarded: httpx.Request | None = None) -> Iterator[None]:
    """Re-raise httpx transport errors as the httpx2 exceptions of the same name."""
    try:
        yield
    except StepFailure as exc:
        # The guard's refusals pass through unchanged, carrying the request as httpx would.
        if forwarded is not None and isinstance(exc, httpx.RequestError):
            exc.request = forwarded
        raise
    except httpx.HTTPError as exc:
        for cls in type(exc).__mro__:
            target = getattr(httpx2, cls.__name__, None)
            if isinstance(target, type) and issubclass(target, httpx2.RequestError):
                raise target(str(exc), request=request) from exc
        raise httpx2.TransportError(str(exc), request=request) from exc
