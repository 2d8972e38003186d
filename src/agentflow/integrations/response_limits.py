"""Bound a response body: size after decompression, and the exchange's deadline.

The size limit counts decoded bytes: a 10 MiB gzip body can inflate to gigabytes, so the
transport decodes gzip and deflate itself, with ``zlib``'s ``max_length`` stopping at the
limit, and hands httpx an identity-encoded body. Encodings it cannot bound this way (br,
zstd, stacked encodings) are not asked for and are refused if a server sends them anyway.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterable, AsyncIterator
from typing import Protocol

import httpx

from agentflow.integrations.http_errors import RequestDeadlineExceeded, ResponseTooLarge, httpx_errors

ACCEPT_ENCODING = "gzip, deflate"


class Decoder(Protocol):
    """A ``zlib`` decompression object, as far as the body reader uses it."""

    def decompress(self, data: bytes, max_length: int = ..., /) -> bytes: ...

    def flush(self, length: int = ..., /) -> bytes: ...


def decoder_for(response_headers: httpx.Headers, request: httpx.Request) -> Decoder | None:
    """The decoder for the response's ``Content-Encoding`` (None for identity).

    Raises:
        httpx.DecodingError: an encoding whose output the client cannot bound.
    """
    encoding = response_headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if encoding == "deflate":
        return _DeflateDecoder()
    raise httpx.DecodingError(
        f"the server answered with Content-Encoding {encoding!r}, which the guarded client did not "
        f"ask for (it accepts {ACCEPT_ENCODING!r}) and cannot decode within its size limit",
        request=request,
    )


class _DeflateDecoder:
    """HTTP "deflate" is meant to be zlib-wrapped but is often raw; decide on the first bytes."""

    def __init__(self) -> None:
        self._inner: Decoder | None = None

    def decompress(self, data: bytes, max_length: int = 0, /) -> bytes:
        if self._inner is None:
            wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            self._inner = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        return self._inner.decompress(data, max_length)

    def flush(self, length: int = zlib.DEF_BUF_SIZE, /) -> bytes:
        return b"" if self._inner is None else self._inner.flush(length)


class BoundedBody(httpx.AsyncByteStream):
    """A response body that stops at ``limit`` decoded bytes and at ``deadline``.

    Args:
        raw: httpcore's body stream.
        request: the request, for error reports.
        limit: the most decoded bytes the caller may receive.
        deadline: ``loop.time()`` by which the last byte must have arrived.
        timeout: the configured total timeout, for the error message.
        decoder: decompresses the body, or None for identity.
    """

    def __init__(
        self,
        raw: AsyncIterable[bytes],
        *,
        request: httpx.Request,
        limit: int,
        deadline: float,
        timeout: float,
        decoder: Decoder | None,
    ) -> None:
        self._raw = raw
        self._request = request
        self._limit = limit
        self._deadline = deadline
        self._timeout = timeout
        self._decoder = decoder
        self._received = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = aiter(self._raw)
        while True:
            try:
                async with asyncio.timeout_at(self._deadline):
                    with httpx_errors(self._request):
                        chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise RequestDeadlineExceeded(
                    self._request.url, self._timeout, request=self._request
                ) from None
            if self._decoder is not None:
                chunk = self._decode(chunk)
            if chunk:
                yield self._count(chunk)
        if self._decoder is not None:
            # Every decompress call ended below its output cap, so all input was consumed
            # and the tail is what zlib still buffers: small.
            tail = self._decoder.flush()
            if tail:
                yield self._count(tail)

    def _decode(self, data: bytes) -> bytes:
        assert self._decoder is not None
        room = self._limit - self._received
        try:
            # One byte past the room is enough to know the limit is exceeded.
            return self._decoder.decompress(data, room + 1)
        except zlib.error as exc:
            raise httpx.DecodingError(f"the response body is not valid {exc}", request=self._request) from exc

    def _count(self, chunk: bytes) -> bytes:
        self._received += len(chunk)
        if self._received > self._limit:
            raise ResponseTooLarge(self._request.url, self._limit, request=self._request)
        return chunk

    async def aclose(self) -> None:
        close = getattr(self._raw, "aclose", None)
        if close is not None:
            await close()


def check_declared_size(headers: httpx.Headers, request: httpx.Request, limit: int) -> None:
    """Refuse before reading when ``Content-Length`` already says the body is too large.

    Raises:
        ResponseTooLarge: the declared length passes ``limit``.
    """
    declared = headers.get("content-length", "")
    if declared.strip().isdigit() and int(declared) > limit:
        raise ResponseTooLarge(request.url, limit, request=request)
