"""A real MCP server for tests, built with the SDK's own server (``MCPServer``, mcp 2's FastMCP).

Run it as a script to serve over stdio (``[sys.executable, SCRIPT]``), or mount ``build()``'s
streamable HTTP app in the test's uvicorn (``serve_http``). Its tools: ``echo``, ``add``,
``fail`` (answers with an error), ``crash`` (the process exits mid-call) and ``slow``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

SCRIPT = str(Path(__file__).resolve())
COMMAND = [sys.executable, SCRIPT]


def build() -> MCPServer:
    """The test server with its five tools."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    server = MCPServer("agentflow-test", log_level="WARNING")
    root.handlers[:], root.level = handlers, level  # it configures logging: not the test's

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def fail(reason: str = "it broke") -> str:
        """Always answers with an error."""
        raise ToolError(f"cannot do that: {reason}")

    @server.tool()
    async def crash() -> str:
        """The server process dies in the middle of the call."""
        print("crashing on purpose", file=sys.stderr, flush=True)
        os._exit(3)

    @server.tool()
    async def slow(seconds: float) -> str:
        """Answer after ``seconds``."""
        await asyncio.sleep(seconds)
        return "done"

    return server


@asynccontextmanager
async def serve_http(
    required: dict[str, str] | Callable[[dict[str, str]], bool] | None = None,
) -> AsyncIterator[str]:
    """Serve the test server over streamable HTTP on 127.0.0.1 until the block ends; yield its
    endpoint URL (``http://127.0.0.1:<port>/mcp``). ``required``: headers every request must
    carry (else 401), as a server that takes an API key does, or a check of the request's
    headers (lower-case names), as one that takes OAuth2 tokens does."""
    import uvicorn

    from tests.support.http_server import loopback_socket

    sock, port = loopback_socket()
    app = build().streamable_http_app()
    config = uvicorn.Config(
        app if not required else _guarded(app, required), log_level="warning", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve([sock]))
    try:
        while not server.started:
            assert not task.done(), "the MCP test server did not start"
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)
        sock.close()


def _guarded(app: Any, required: dict[str, str] | Callable[[dict[str, str]], bool]) -> Any:
    """``app`` behind a check of ``required`` headers: 401 without them."""

    def allowed(got: dict[str, str]) -> bool:
        if callable(required):
            return required(got)
        return all(got.get(name.lower()) == value for name, value in required.items())

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            got = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            if not allowed(got):
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"missing key"})
                return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    build().run()
