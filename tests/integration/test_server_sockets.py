"""Servers started in-process answer on connections with Nagle's algorithm off.

asyncio disables Nagle only on sockets whose ``proto`` says TCP, and an accepted connection
inherits the listener's: a listener made as ``socket.socket(AF_INET, SOCK_STREAM)`` (proto 0)
left it on, and every reply written in parts waited for the client's delayed ACK (42 ms per
request to the test servers). Checked on the accepted socket itself, found by the client's port.
"""

from __future__ import annotations

import os
import smtplib
import socket

import httpx
import psutil
from starlette.types import Receive, Scope, Send

from agentflow.integrations.smtp_sink import SmtpSink
from tests.support.http_server import serve


def nagle_off_where_client_is(client_port: int) -> bool:
    """TCP_NODELAY of this process's socket whose peer is ``127.0.0.1:client_port``."""
    for conn in psutil.Process().net_connections(kind="tcp"):
        if conn.raddr and conn.raddr.port == client_port and conn.fd != -1:
            with socket.socket(fileno=os.dup(conn.fd)) as accepted:
                return bool(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    raise AssertionError(f"no accepted connection from port {client_port}")


async def test_the_test_servers_turn_nagle_off() -> None:
    seen: list[bool] = []

    async def app(scope: Scope, _receive: Receive, send: Send) -> None:
        seen.append(nagle_off_where_client_is(scope["client"][1]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async with serve(app) as base, httpx.AsyncClient() as client:
        assert (await client.get(base)).status_code == 200
    assert seen == [True]


def test_the_smtp_sink_turns_nagle_off() -> None:
    with SmtpSink() as sink, smtplib.SMTP(sink.host, sink.port, timeout=10) as smtp:
        smtp.ehlo()
        assert smtp.sock is not None
        assert nagle_off_where_client_is(smtp.sock.getsockname()[1])
