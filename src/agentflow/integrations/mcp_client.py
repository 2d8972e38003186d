"""Talk to MCP servers through the official ``mcp`` SDK: start or connect, list tools, call one.

Each operation opens its own connection (a stdio server is started for it and stopped after
it; an HTTP server gets a new session) and closes it before returning, so nothing is held
between steps and a server that died since the last call costs nothing but a restart. Only
the tool listings agents are offered are kept, per key (the caller's: workflow version and
server), in the connector of one worker process.

HTTP servers are reached through the guarded HTTP client (``agentflow.integrations.sdk_http``):
the same destination checks and limits as every other workspace-controlled URL.

Every failure becomes a ``StepFailure`` with a stable code:

* ``mcp_unavailable`` (retryable): the server could not be started or reached, closed the
  connection before it answered, or did not answer within its ``timeout``;
* ``mcp_connection_lost`` (retryable): the connection ended during a tool call (the server
  crashed, say): the call may or may not have taken effect;
* ``mcp_tool_error`` (not retryable): the tool answered with ``isError``; its text is kept;
* ``mcp_tool_unknown`` / ``invalid_tool_args`` (not retryable): the server lists no such tool,
  or the arguments break its input schema (checked before calling);
* ``mcp_protocol_error`` (not retryable): the server answered with something else than MCP
  allows (a JSON-RPC error, a malformed result);
* the guarded client's own refusals (``destination_blocked``, ...) pass through unchanged.

The SDK is imported on first use: it takes seconds to import, and most processes never need it.
"""

from __future__ import annotations

import logging
import tempfile
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import anyio
import httpx2
import orjson

from agentflow.core import json_schemas
from agentflow.core.errors import StepFailure
from agentflow.core.frozen import frozen
from agentflow.core.mcp import McpServer
from agentflow.integrations.destinations import Resolver
from agentflow.integrations.mcp_failures import Progress, failure
from agentflow.integrations.sdk_http import guarded_sdk_client

if TYPE_CHECKING:
    from mcp import Client

logger = logging.getLogger(__name__)

T = TypeVar("T")

MAX_TEXT = 100_000
"""Characters of a result's text content kept (the step records it)."""
MAX_STRUCTURED = 1_000_000
"""Bytes of a result's structured content (as JSON) kept."""
MAX_TOOLS = 1000
MAX_PAGES = 50


@frozen
class McpTool:
    """A tool a server lists.

    Attributes:
        name: its name on the server.
        description: what it does, for a model.
        input_schema: the JSON Schema of its arguments.
    """

    name: str
    description: str
    input_schema: dict[str, Any]


@frozen
class McpResult:
    """What a tool answered (never an error: those raise ``mcp_tool_error``).

    Attributes:
        text: its text content blocks joined by blank lines (cut at ``MAX_TEXT``).
        content: every content block as JSON (images, audio and blobs by size, not bytes).
        structured: its structured content, if any.
        truncated: something was cut to fit the limits.
    """

    text: str
    content: list[dict[str, Any]]
    structured: Any = None
    truncated: bool = False

    def to_json(self) -> dict[str, Any]:
        """The step's output: ``text``, ``content``, and ``structured`` / ``truncated`` when set."""
        out: dict[str, Any] = {"text": self.text, "content": self.content}
        if self.structured is not None:
            out["structured"] = self.structured
        if self.truncated:
            out["truncated"] = True
        return out


class McpConnector:
    """One worker's way to MCP servers.

    Args:
        allow: allow-list entries that open non-public destinations to HTTP servers
            (``settings.http_allow_list``).
        resolver: the guarded client's resolver (the system's by default).
        cache_size: tool listings kept (least recently used dropped first).
    """

    def __init__(
        self, allow: Sequence[str] = (), *, resolver: Resolver | None = None, cache_size: int = 256
    ) -> None:
        self._allow = tuple(allow)
        self._resolver = resolver
        self._cache_size = cache_size
        self._listings: OrderedDict[Hashable, tuple[McpTool, ...]] = OrderedDict()

    def cached(self, key: Hashable) -> tuple[McpTool, ...] | None:
        """The listing kept under ``key``, if any."""
        found = self._listings.get(key)
        if found is not None:
            self._listings.move_to_end(key)
        return found

    def _keep(self, key: Hashable | None, tools: tuple[McpTool, ...]) -> None:
        if key is None:
            return
        self._listings[key] = tools
        self._listings.move_to_end(key)
        while len(self._listings) > self._cache_size:
            self._listings.popitem(last=False)

    async def list_tools(self, server: McpServer, *, key: Hashable | None = None) -> tuple[McpTool, ...]:
        """The server's tools that its ``tools`` allow-list lets through; kept under ``key``.

        Raises:
            StepFailure: ``mcp_unavailable``, ``mcp_protocol_error``, a guard refusal.
        """
        found = self.cached(key) if key is not None else None
        if found is not None:
            return found

        async def listing(client: Client, progress: Progress) -> tuple[McpTool, ...]:
            progress.phase = "list"
            return await _listing(client, server)

        tools = await self._with_client(server, None, listing)
        self._keep(key, tools)
        return tools

    async def call(
        self, server: McpServer, tool: str, arguments: dict[str, Any], *, key: Hashable | None = None
    ) -> McpResult:
        """Check ``tool`` is listed and ``arguments`` fit its schema, then call it.

        The listing kept under ``key`` is used when there is one; otherwise the server is asked
        on the same connection (and the answer kept under ``key``).

        Raises:
            StepFailure: any of the module's codes.
        """
        known = self.cached(key) if key is not None else None

        async def listed_then_call(client: Client, progress: Progress) -> tuple[tuple[McpTool, ...], Any]:
            progress.phase = "list"
            tools = known if known is not None else await _listing(client, server)
            _check_arguments(server, tool, arguments, tools)
            progress.phase = "call"
            return tools, await client.call_tool(tool, arguments)

        tools, result = await self._with_client(server, tool, listed_then_call)
        if known is None:
            self._keep(key, tools)
        return _result(server, tool, result)

    async def _with_client(
        self, server: McpServer, tool: str | None, use: Callable[[Client, Progress], Awaitable[T]]
    ) -> T:
        """Connect, run ``use``, close; every failure mapped (by how far it got)."""
        progress = Progress()
        # A stdio server's stderr goes to a file, whose tail explains a server that stops.
        errlog: TextIO
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
            try:
                with anyio.fail_after(server.timeout.total_seconds()):
                    async with self._client(server, errlog, progress) as client:
                        return await use(client, progress)
            except BaseException as exc:  # every failure gets its code (mcp_failures)
                coded = failure(exc, server, progress, tool, errlog)
                if coded is None:
                    raise
                raise coded from None

    @asynccontextmanager
    async def _client(self, server: McpServer, errlog: TextIO, progress: Progress) -> AsyncIterator[Client]:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp.client.streamable_http import streamable_http_client

        timeout = server.timeout.total_seconds()
        if server.command is not None:
            params = StdioServerParameters(command=server.command[0], args=server.command[1:], env=server.env)
            async with Client(
                stdio_client(params, errlog=errlog), read_timeout_seconds=timeout, cache=None
            ) as c:
                yield c
            return
        assert server.url is not None
        # The deadline of one exchange is the guard's; the server's timeout (below it) answers first.
        http = guarded_sdk_client(
            allow=self._allow, resolver=self._resolver, timeout=timeout + 5.0, headers=server.headers
        )

        async def note_status(response: httpx2.Response) -> None:
            # The SDK turns an HTTP error into a JSON-RPC one without its status: keep it here.
            if response.status_code >= 400:
                progress.http_status = response.status_code

        http.event_hooks = {"response": [note_status]}
        async with (
            http,
            Client(
                streamable_http_client(server.url, http_client=http), read_timeout_seconds=timeout, cache=None
            ) as c,
        ):
            yield c


async def _listing(client: Client, server: McpServer) -> tuple[McpTool, ...]:
    """Every tool the server lists (page by page) that ``server.tools`` lets through."""
    found: list[McpTool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        for tool in page.tools:
            if server.offers(tool.name) and len(found) < MAX_TOOLS:
                schema = dict(tool.input_schema or {"type": "object"})
                found.append(McpTool(tool.name, tool.description or "", schema))
        cursor = page.next_cursor
        if not cursor:
            break
    return tuple(found)


def _check_arguments(
    server: McpServer, tool: str, arguments: dict[str, Any], tools: Sequence[McpTool]
) -> None:
    """Refuse a tool the server does not list, or arguments its schema refuses (not retryable)."""
    spec = next((t for t in tools if t.name == tool), None)
    if spec is None:
        names = ", ".join(t.name for t in tools[:50]) or "none"
        raise StepFailure(
            "mcp_tool_unknown",
            f"MCP server {server.name!r} lists no tool {tool!r} (it lists: {names})",
            retryable=False,
            details={"server": server.name, "tool": tool, "tools": [t.name for t in tools[:200]]},
            solution="Use one of the tools the server lists (and its tools allow-list lets through).",
        )
    problems = schema_problems(spec.input_schema, arguments)
    if problems:
        raise StepFailure(
            "invalid_tool_args",
            f"arguments for MCP tool {server.name}/{tool} are invalid: {'; '.join(problems)}",
            retryable=False,
            details={"server": server.name, "tool": tool, "problems": problems},
            solution="Give the arguments the tool's input schema asks for.",
        )


def schema_problems(schema: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
    """Every way ``arguments`` break ``schema`` (empty: valid, or a schema that cannot be read:
    the server's own schema is broken, so the server judges the arguments)."""
    return json_schemas.problems(schema, arguments, checked=True)


def _result(server: McpServer, tool: str, result: Any) -> McpResult:
    """The SDK's ``CallToolResult`` as JSON; an ``isError`` answer raises ``mcp_tool_error``."""
    blocks: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in result.content or ():
        data = block.model_dump(mode="json", by_alias=True, exclude_none=True)
        data.pop("_meta", None)
        _drop_bytes(data)
        if data.get("resource"):
            _drop_bytes(data["resource"])
        if data.get("type") == "text":
            texts.append(str(data.get("text", "")))
        blocks.append(data)
    text = "\n\n".join(texts)
    truncated = len(text) > MAX_TEXT
    if truncated:
        text = text[:MAX_TEXT]
        blocks = [{**b, "text": b["text"][:MAX_TEXT]} if b.get("type") == "text" else b for b in blocks]
    if result.is_error:
        raise StepFailure(
            "mcp_tool_error",
            f"MCP tool {server.name}/{tool} answered with an error: {text[:2000] or '(no text)'}",
            retryable=False,
            details={"server": server.name, "tool": tool, "text": text[:10_000]},
            solution="Read the tool's message: fix the arguments, or what the tool depends on.",
        )
    structured = result.structured_content
    if structured is not None and len(orjson.dumps(structured)) > MAX_STRUCTURED:
        structured, truncated = None, True
    return McpResult(text, blocks, structured, truncated)


def _drop_bytes(block: dict[str, Any]) -> None:
    """Replace base64 ``data`` / ``blob`` with their decoded size: steps keep JSON, not media."""
    for name in ("data", "blob"):
        if isinstance(block.get(name), str):
            block["bytes"] = len(block.pop(name)) * 3 // 4
