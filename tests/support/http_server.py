"""A real uvicorn server for API tests (127.0.0.1, a free port, the test's loop), and client helpers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from starlette.types import ASGIApp

from agentflow.api.server import ApiServer

WORKFLOWS = "/api/ai/workflows"


def loopback_socket() -> tuple[socket.socket, int]:
    """A TCP socket bound to a free port of 127.0.0.1, for a server to listen on; and its port."""
    # IPPROTO_TCP named: asyncio turns Nagle off only on sockets whose proto says TCP, and an
    # accepted socket inherits 0 from a listener made without it (40 ms per request then).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock, int(sock.getsockname()[1])


@asynccontextmanager
async def serve(app: ASGIApp) -> AsyncIterator[str]:
    """Serve ``app`` until the block ends; yield its base URL.

    The socket is bound here (port 0) and handed to uvicorn, so no other process can take
    the port between choosing and binding it.
    """
    sock, port = loopback_socket()
    config = uvicorn.Config(app, lifespan="off", log_level="warning", timeout_graceful_shutdown=5)
    server = ApiServer(config)
    try:
        task = await server.serve_until_started([sock])
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, 15)
    finally:
        sock.close()


async def publish(client: httpx.AsyncClient, config: dict[str, Any], **params: Any) -> dict[str, Any]:
    """POST a config; it must be accepted (201 or 200)."""
    response = await client.post(WORKFLOWS, json=config, params=params)
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


async def start(client: httpx.AsyncClient, workflow: str, payload: Any = None) -> dict[str, Any]:
    """Start a run; it must be created (201)."""
    response = await client.post(f"{WORKFLOWS}/{workflow}/runs", json={"payload": payload})
    assert response.status_code == 201, response.text
    return dict(response.json())


async def poll_run(
    client: httpx.AsyncClient, workflow: str, run_id: str, statuses: set[str], timeout: float = 60
) -> dict[str, Any]:
    """GET the run until its status is one of ``statuses`` (or ``timeout`` passes)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        response = await client.get(f"{WORKFLOWS}/{workflow}/runs/{run_id}")
        assert response.status_code == 200, response.text
        body = dict(response.json())
        if body["status"] in statuses or asyncio.get_running_loop().time() > deadline:
            return body
        await asyncio.sleep(0.05)


def error_code(response: httpx.Response, status: int) -> str:
    """Check ``status`` and the error contract's shape; return the error code."""
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"]), body
    return str(body["error"]["code"])
