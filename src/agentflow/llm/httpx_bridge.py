"""Let the OpenAI and Anthropic SDKs send through an ``httpx.AsyncClient``.

Both SDKs are built on ``httpx2`` (a fork of httpx under another name) and Anthropic refuses
an ``httpx`` client outright, while the engine's guarded HTTP client, the one place that
enforces the SSRF rules on model base URLs, is an ``httpx.AsyncClient``. ``bridged_client``
wraps it in an ``httpx2.AsyncClient`` whose transport hands every request to it, so each
request (and each redirect hop) still passes the guard.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2


def bridged_client(client: httpx.AsyncClient) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` that sends every request through ``client``.

    Closing the returned client does not close ``client`` (the engine owns it).
    """
    # trust_env off: proxies from the environment must not route around the guard.
    return httpx2.AsyncClient(transport=HttpxTransport(client), trust_env=False)


class HttpxTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport that sends requests with an ``httpx.AsyncClient``.

    Args:
        client: the client that really sends (and checks) each request.
    """

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send ``request`` through the httpx client; stream its answer back as httpx2."""
        body = await request.aread()
        timeout = request.extensions.get("timeout")
        outgoing = self._client.build_request(
            request.method,
            str(request.url),
            headers=request.headers.multi_items(),
            content=body,
            timeout=httpx.Timeout(**timeout) if isinstance(timeout, dict) else httpx.USE_CLIENT_DEFAULT,
        )
        try:
            response = await self._client.send(outgoing, stream=True)
        except httpx.RequestError as exc:
            raise _as_httpx2(exc, request) from exc
        kept = ("http_version", "reason_phrase")
        extensions = {key: response.extensions[key] for key in kept if key in response.extensions}
        # The body is handed over decoded (httpx already undid any gzip), so the headers that
        # describe the encoded form must not travel with it.
        headers = [
            (name, value)
            for name, value in response.headers.multi_items()
            if name.lower() not in ("content-encoding", "content-length")
        ]
        return httpx2.Response(
            response.status_code,
            headers=headers,
            stream=_DecodedStream(response, request),
            extensions=extensions,
        )


class _DecodedStream(httpx2.AsyncByteStream):
    def __init__(self, response: httpx.Response, request: httpx2.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_bytes():
                yield chunk
        except httpx.RequestError as exc:
            raise _as_httpx2(exc, self._request) from exc

    async def aclose(self) -> None:
        await self._response.aclose()


def _as_httpx2(exc: httpx.RequestError, request: httpx2.Request) -> httpx2.RequestError:
    """The httpx2 twin of an httpx error, so the SDK tells a timeout from a refused connection.

    Subclasses (the guard's own errors) map to their nearest httpx ancestor.
    """
    for cls in type(exc).__mro__:
        if cls.__module__.partition(".")[0] != "httpx":
            continue
        twin: Any = getattr(httpx2, cls.__name__, None)
        if isinstance(twin, type) and issubclass(twin, httpx2.RequestError):
            error: httpx2.RequestError = twin(str(exc) or type(exc).__name__, request=request)
            return error
    return httpx2.TransportError(str(exc), request=request)
