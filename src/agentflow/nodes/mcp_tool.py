"""The ``mcp_tool`` node: call one tool of an MCP server (spec in
``agentflow.core.graph.mcp_nodes``; the client in ``agentflow.integrations.mcp_client``).

Each execution opens its own connection (a stdio server is started and stopped with it), lists
the server's tools on it to check the tool and the rendered arguments, calls the tool, and
closes the connection before the step is checkpointed.
"""

from __future__ import annotations

from typing import Any

from agentflow.core.errors import StepFailure
from agentflow.core.graph.mcp_nodes import McpToolNode
from agentflow.core.node_specs import NodeSpec
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.integrations.mcp_client import McpConnector
from agentflow.nodes.base import BaseRunner, NodeEnv
from agentflow.nodes.credential_access import scrubbed
from agentflow.nodes.mcp_credentials import with_credential


class McpToolRunner(BaseRunner):
    """Render the args, call the tool, send on what it answered."""

    kind = "mcp_tool"

    def describe(self, node: NodeSpec) -> str | None:
        """``server/tool``."""
        assert isinstance(node, McpToolNode)
        return f"{node.server}/{node.tool}"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """The tool's answer (``text``, ``content``, ``structured``) is the output."""
        assert isinstance(node, McpToolNode)
        server = next((s for s in env.mcp_servers if s.name == node.server), None)
        if server is None:  # refused at publish; a worker that was not given the servers
            raise StepFailure(
                "mcp_server_unknown",
                f"mcp_tool node {node.id!r}: the workflow declares no MCP server {node.server!r}",
                retryable=False,
                details={"node": node.id, "server": node.server},
                solution="Declare the server in the workflow's mcp_servers.",
            )
        args = await env.render(node.args, node.id, "args")  # a dict renders to a dict
        connector = env.mcp or McpConnector()
        step_input = {"server": server.name, "tool": node.tool, "arguments": args}
        try:
            result, used = await with_credential(
                env.credentials, ctx.workspace_id, server, f"node {node.id!r}",
                lambda reached: connector.call(reached, node.tool, args),
            )  # fmt: skip
        except StepFailure as failure:  # name the node too: several may call one server
            info = failure.info
            raise StepFailure(
                info.code,
                f"node {node.id!r}: {info.message}",
                retryable=failure.retryable,
                details={**info.details, "node": node.id},
                solution=info.solution,
            ) from None
        return step_input, NodeResult(output=scrubbed(result.to_json(), used))
