"""Just enough of PostgreSQL's wire protocol for a proxy in front of a server: where the
server listens, the startup handshake, and messages framed in a byte stream.

See https://www.postgresql.org/docs/current/protocol-message-formats.html.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104


@dataclass(frozen=True)
class Upstream:
    """Where the real server listens: a TCP ``host``/``port`` or a unix socket ``path``."""

    host: str | None = None
    port: int = 5432
    path: str | None = None

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.path is not None:
            return await asyncio.open_unix_connection(self.path)
        assert self.host is not None
        return await asyncio.open_connection(self.host, self.port)


def upstream_of(url: str) -> Upstream:
    """The server a ``postgresql://`` URL points at (``?host=/dir`` means a unix socket)."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or "127.0.0.1"])[0]
    port = int(query.get("port", [parts.port or 5432])[0])
    if host.startswith("/"):
        return Upstream(path=f"{host}/.s.PGSQL.{port}")
    return Upstream(host=host, port=port)


def through_port(server_url: str, port: int) -> str:
    """``server_url`` (same user, database and other parameters) through a proxy listening on
    127.0.0.1:``port``, in clear (the proxy reads the protocol)."""
    parts = urlsplit(server_url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items() if k not in ("host", "port")}
    query["sslmode"] = "disable"
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo + '@' if userinfo else ''}127.0.0.1:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query), ""))


async def pass_startup(
    reader: asyncio.StreamReader, cwriter: asyncio.StreamWriter, swriter: asyncio.StreamWriter
) -> None:
    """Pass the client's startup message on (its untyped messages before it), refusing SSL
    and GSS encryption ourselves ('N') so that the rest of the link stays readable."""
    while True:
        header = await reader.readexactly(8)
        length, code = struct.unpack("!ii", header)
        body = await reader.readexactly(length - 8)
        if code in (SSL_REQUEST, GSSENC_REQUEST):
            cwriter.write(b"N")
            await cwriter.drain()
            continue
        swriter.write(header + body)
        await swriter.drain()
        return


def frames(data: bytes | bytearray) -> Iterator[tuple[bytes, int, int]]:
    """Each whole typed message at the start of ``data``, in order: its type byte, and where
    it starts and ends. A message cut off at the end of ``data`` is left for later."""
    offset = 0
    while len(data) - offset >= 5:
        end = offset + 1 + struct.unpack_from("!i", data, offset + 1)[0]
        if len(data) < end:
            return
        yield bytes(data[offset : offset + 1]), offset, end
        offset = end


def cstring(data: bytes) -> tuple[str, bytes]:
    """A NUL-terminated string at the start of ``data``, and what follows it."""
    end = data.index(b"\x00")
    return data[:end].decode("utf-8", "replace"), data[end + 1 :]
