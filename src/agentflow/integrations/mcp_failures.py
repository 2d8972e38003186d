"""What went wrong talking to an MCP server, as a ``StepFailure`` with a stable code (the
codes are listed in ``agentflow.integrations.mcp_client``): from the SDK's exceptions, how far
the operation got, an HTTP status the SDK hides under a JSON-RPC error, and the end of a stdio
server's stderr.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import IO, Any

import anyio

from agentflow.core.errors import StepFailure
from agentflow.core.mcp import McpServer

STDERR_TAIL = 2000
CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001


@dataclass
class Progress:
    """How far an operation got: ``start`` (spawn, connect, handshake), ``list`` or ``call``."""

    phase: str = "start"
    http_status: int | None = None


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, or ``exc`` itself."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def failure(
    exc: BaseException, server: McpServer, progress: Progress, tool: str | None, errlog: IO[str]
) -> StepFailure | None:
    """The structured failure for ``exc``, or None to let it pass (cancellation, ...)."""
    from mcp import MCPError
    from pydantic import ValidationError

    leaves = _leaves(exc)
    if any(isinstance(leaf, (KeyboardInterrupt, SystemExit)) for leaf in leaves):
        return None
    for leaf in leaves:
        if isinstance(leaf, StepFailure):
            return leaf  # ours (mcp_tool_unknown, invalid_tool_args) or the guard's refusals
    cancelled = anyio.get_cancelled_exc_class()
    found = next((e for e in leaves if not isinstance(e, cancelled)), None)
    if found is None:
        return None  # a cancellation from outside (the step's own timeout, shutdown): let it go
    leaf = found
    phase = progress.phase
    details: dict[str, Any] = {"server": server.name, "transport": server.transport, "phase": phase}
    if tool is not None:
        details["tool"] = tool
    stderr = _tail(errlog)
    if stderr:
        details["stderr"] = stderr
    said = f" Its stderr ends with: {stderr[-500:]!r}" if stderr else ""
    who = f"MCP server {server.name!r} ({server.where()})"
    doing = f"the call to {tool!r}" if phase == "call" else "the connection"
    if isinstance(leaf, TimeoutError) or (isinstance(leaf, MCPError) and leaf.code == REQUEST_TIMEOUT):
        what = "start and answer" if phase == "start" else f"answer {doing}"
        return _unavailable(
            f"{who} did not {what} within {server.timeout.total_seconds():g}s.{said}",
            details,
            "Check that the server answers (start it by hand on the worker), or raise its timeout.",
        )
    if isinstance(leaf, OSError) and phase == "start" and server.command is not None:
        return _unavailable(
            f"{who} could not be started: {leaf.strerror or leaf}.",
            {**details, "error": type(leaf).__name__},
            f"Install {server.command[0]!r} on every worker, or give its full path as command[0].",
        )
    if isinstance(leaf, MCPError) and leaf.code == CONNECTION_CLOSED:
        if phase == "call":
            return StepFailure(
                "mcp_connection_lost",
                f"{who} closed the connection during {doing} (did it crash?); the call may or may "
                f"not have taken effect.{said}",
                retryable=True,
                details=details,
                solution="Look at the server's own logs for why it stopped; the step is retried.",
            )
        return _unavailable(
            f"{who} closed the connection before answering (it exited, or is not an MCP "
            f"server on {server.transport}).{said}",
            details,
            "Start the command by hand on the worker to see why it stops, and check it speaks "
            "MCP over stdio (or the URL serves MCP over streamable HTTP).",
        )
    if isinstance(leaf, MCPError) and progress.http_status is not None:
        return _http_status(progress.http_status, who, doing, details)
    if isinstance(leaf, MCPError):
        return StepFailure(
            "mcp_protocol_error",
            f"{who} answered {doing} with error {leaf.code}: {leaf.message[:1000]}",
            retryable=False,
            details={**details, "mcp_code": leaf.code},
            solution="Check the server's version and what it expects; its error says what is wrong.",
        )
    if isinstance(leaf, ValidationError):
        return StepFailure(
            "mcp_protocol_error",
            f"{who} sent an answer that is not valid MCP: {str(leaf)[:1000]}",
            retryable=False,
            details=details,
            solution="Upgrade the server or use one that follows the MCP specification.",
        )
    return _unavailable(
        f"{who} could not be reached: {type(leaf).__name__}: {str(leaf)[:1000]}.{said}",
        {**details, "error": type(leaf).__name__},
        "Check the URL (or command), the network, and that the server is running.",
    )


def _http_status(status: int, who: str, doing: str, details: dict[str, Any]) -> StepFailure:
    """An HTTP error status under the SDK's JSON-RPC error: retryable when the server may recover."""
    details = {**details, "http_status": status}
    message = f"{who} answered {doing} with HTTP {status}"
    if status in (408, 425, 429) or status >= 500:
        return _unavailable(
            f"{message}.", details, "The server is overloaded or failing; the step is retried."
        )
    if status in (401, 403):
        solution = "Check the server's headers (Authorization): it refused them."
    elif status == 404:
        solution = "Check the URL's path: it is where the server serves MCP (often /mcp)."
    else:
        solution = "Check the URL and headers against what the server expects."
    return StepFailure(
        "mcp_protocol_error", f"{message}.", retryable=False, details=details, solution=solution
    )


def _unavailable(message: str, details: dict[str, Any], solution: str) -> StepFailure:
    return StepFailure("mcp_unavailable", message, retryable=True, details=details, solution=solution)


def _tail(errlog: IO[str]) -> str:
    """The last lines a stdio server wrote to stderr (empty for HTTP servers)."""
    try:
        fd = errlog.fileno()
        size = os.fstat(fd).st_size
        start = max(0, size - STDERR_TAIL * 4)
        raw = os.pread(fd, size - start, start)
    except (OSError, ValueError):
        return ""
    return raw.decode("utf-8", "replace")[-STDERR_TAIL:].strip()
