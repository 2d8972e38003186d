"""The ``mcp_tool`` node: call one tool of an MCP server the workflow declares (``mcp_servers``).

The runner (``agentflow.nodes.mcp_tool``) connects to the server, checks the tool is listed
and the rendered ``args`` match its input schema, calls it, and sends on what it answered:
``text`` (its text content joined), ``content`` (every content block), ``structured`` (its
structured content, when it returns one) and ``truncated`` (when a limit cut it). A tool that
answers with an error fails the step with ``mcp_tool_error`` (not retried); a server that
cannot be reached, or that drops the connection mid-call, fails it with ``mcp_unavailable`` /
``mcp_connection_lost`` (retried).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from agentflow.core.mcp import SERVER_NAME_PATTERN
from agentflow.core.node_specs import AgentToolFields, NodeSpec, register_node_spec

RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "content": {"type": "array", "items": {"type": "object"}},
        "structured": {},
        "truncated": {"type": "boolean"},
    },
    "additionalProperties": False,
}


class McpToolNode(AgentToolFields, NodeSpec):
    """Call ``tool`` of the MCP server ``server`` with ``args`` (values may be templates)."""

    title: ClassVar[str] = "MCP tool"
    result_schema: ClassVar[dict[str, Any]] = RESULT_SCHEMA

    type: Literal["mcp_tool"] = "mcp_tool"
    server: str = Field(pattern=SERVER_NAME_PATTERN, description="The name of one of mcp_servers.")
    tool: str = Field(min_length=1, max_length=128, description="The tool's name on that server.")
    args: dict[str, Any] = Field(
        default_factory=dict, description="The tool's arguments by name (values may be templates)."
    )


register_node_spec(McpToolNode)
