"""MCP tools in agent runs: offered to the model as ``<server>__<tool>``, checked, called.

Before each decision the workflow's ``mcp_servers`` are asked for their tools; the listings are
kept by the worker's connector per workflow version and server definition, so a server is
asked once per version and worker process, not once per decision. A server that cannot be
reached then fails the decision step (``mcp_unavailable``, retried per the workflow's policy).

A call is executed like every tool call: its own checkpointed step, refused before anything
runs when the tool is not offered or its arguments break the tool's input schema, approved
first when ``approvals`` names it, and its result recorded on the step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

from agentflow.agent.calls import CallContext, ToolOutcome, refusal
from agentflow.agent.env import AgentEnv
from agentflow.core.chat import ToolSchema
from agentflow.core.definitions import AgentConfig
from agentflow.core.mcp import McpServer, offered_name, split_offered
from agentflow.core.records import RunRecord
from agentflow.integrations.mcp_client import McpTool, schema_problems
from agentflow.nodes.credential_access import scrubbed
from agentflow.nodes.mcp_credentials import with_credential


def listing_key(run: RunRecord, server: McpServer) -> Hashable:
    """Where the worker keeps ``server``'s tools for ``run``: its workflow version and the
    server's definition (two agent nodes of one version may name different servers alike)."""
    return ("mcp", run.workflow_id, run.workflow_version, server.fingerprint)


async def offered(config: AgentConfig, run: RunRecord, env: AgentEnv) -> tuple[ToolSchema, ...]:
    """The schemas of every MCP tool the model is offered, server by server in config order.

    Raises:
        StepFailure: ``mcp_unavailable`` and the other codes of
            ``agentflow.integrations.mcp_client`` for the first server that fails.
    """
    servers = config.mcp_servers or []

    async def listing(server: McpServer) -> tuple[McpTool, ...]:
        tools, _used = await with_credential(
            env.credentials, run.workspace_id, server, f"MCP server {server.name!r}",
            lambda reached: env.mcp.list_tools(reached, key=listing_key(run, server)),
        )  # fmt: skip
        return tools

    listings = await asyncio.gather(*(listing(s) for s in servers))
    schemas = []
    for server, tools in zip(servers, listings, strict=True):
        for tool in tools:
            name = offered_name(server.name, tool.name)
            if name is not None:  # a tool whose name cannot be a model's tool name is not offered
                schemas.append(ToolSchema(name, _description(server, tool), _parameters(tool)))
    return tuple(schemas)


def resolve(config: AgentConfig, name: str) -> tuple[McpServer, str] | None:
    """The server and tool an offered name stands for, or None when it names no MCP tool."""
    split = split_offered(name)
    server = config.mcp_server(split[0]) if split is not None else None
    return (server, split[1]) if server is not None and split is not None else None


def check_call(
    ctx: CallContext, server: McpServer, tool: str, arguments: dict[str, Any]
) -> ToolOutcome | None:
    """A refusal when the tool is not offered or the arguments break its schema, else None.

    Uses the listing the decision was offered; without one (another worker decided) the call
    checks on its own connection before calling.
    """
    if not server.offers(tool):
        return refusal("tool_not_allowed", f"{tool!r} is not in the tools of MCP server {server.name!r}")
    listing = ctx.env.mcp.cached(listing_key(ctx.run, server))
    if listing is None:
        return None
    spec = next((t for t in listing if t.name == tool), None)
    if spec is None or offered_name(server.name, tool) is None:
        return refusal("tool_unavailable", f"MCP server {server.name!r} offers no tool {tool!r}")
    problems = schema_problems(spec.input_schema, arguments)
    if problems:
        return refusal(
            "invalid_tool_args", f"arguments for {ctx.call.name!r} are invalid: " + "; ".join(problems)
        )
    return None


async def call(ctx: CallContext, server: McpServer, tool: str, arguments: dict[str, Any]) -> ToolOutcome:
    """Call the tool; what it answered is the result the model sees and the step records.

    Raises:
        StepFailure: retryable (``mcp_unavailable``, ``mcp_connection_lost``: the step is
            retried) or not (``mcp_tool_error`` and the like: the model sees the error).
    """
    where = f"MCP server {server.name!r}"
    result, used = await with_credential(
        ctx.env.credentials, ctx.run.workspace_id, server, where,
        lambda reached: ctx.env.mcp.call(reached, tool, arguments, key=listing_key(ctx.run, server)),
    )  # fmt: skip
    return ToolOutcome(result=scrubbed(result.to_json(), used))


def _description(server: McpServer, tool: McpTool) -> str:
    text = tool.description.strip() or f"The {tool.name!r} tool"
    return f"{text} (MCP server {server.name!r})"[:4000]


def _parameters(tool: McpTool) -> dict[str, Any]:
    """The tool's input schema as vendors take it: an object, without a title."""
    schema = {k: v for k, v in tool.input_schema.items() if k not in ("title", "$schema")}
    if schema.get("type") != "object":
        schema = {"properties": {}, **schema, "type": "object"}
    schema.setdefault("properties", {})
    return schema
