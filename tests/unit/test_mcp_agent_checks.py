"""An agent's MCP tool call is checked before anything runs: the server's ``tools`` allow-list,
the listing the decision was offered, and the tool's input schema; and an ``mcp_tool`` node
whose server the worker was not given fails clearly."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from uuid import uuid4

import pytest

from agentflow.agent import mcp_tools
from agentflow.core.errors import StepFailure
from agentflow.core.graph.mcp_nodes import McpToolNode
from agentflow.core.mcp import McpServer
from agentflow.core.step_context import StepContext
from agentflow.core.tools import ToolRegistry
from agentflow.integrations.mcp_client import McpConnector, McpTool
from agentflow.nodes.base import NodeEnv
from agentflow.nodes.mcp_tool import McpToolRunner
from agentflow.nodes.threads import ToolThreads

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def context(server: McpServer, name: str, listing: tuple[McpTool, ...] | None) -> Any:
    run = SimpleNamespace(workflow_id=uuid4(), workflow_version=3)
    connector = McpConnector()
    if listing is not None:
        connector._keep(mcp_tools.listing_key(run, server), listing)  # type: ignore[arg-type]
    return SimpleNamespace(run=run, env=SimpleNamespace(mcp=connector), call=SimpleNamespace(name=name))


def refusal_code(outcome: Any) -> str | None:
    return None if outcome is None else str(outcome.result["error"]["code"])


def test_a_call_is_checked_against_the_allow_list_the_listing_and_the_schema() -> None:
    server = McpServer(name="srv", command=["srv"], tools=["add", "gone"])
    listing = (McpTool("add", "Add.", SCHEMA),)
    ctx = context(server, "srv__add", listing)
    assert refusal_code(mcp_tools.check_call(ctx, server, "add", {"a": 1})) is None
    assert refusal_code(mcp_tools.check_call(ctx, server, "add", {"a": "x"})) == "invalid_tool_args"
    assert refusal_code(mcp_tools.check_call(ctx, server, "drop", {})) == "tool_not_allowed"
    assert refusal_code(mcp_tools.check_call(ctx, server, "gone", {})) == "tool_unavailable"
    unlisted = context(server, "srv__add", None)
    assert mcp_tools.check_call(unlisted, server, "add", {"a": "x"}) is None, (
        "without the decision's listing the call checks on its own connection"
    )


async def test_a_node_whose_server_the_worker_was_not_given_fails_without_retry() -> None:
    node = McpToolNode(id="call", server="srv", tool="add")
    env = NodeEnv(ToolRegistry(), ToolThreads(), {})
    ctx = StepContext(uuid4(), uuid4(), uuid4(), step_seq=1, attempt=1, fencing_token=1, payload={})
    runner = McpToolRunner()
    assert runner.describe(node) == "srv/add"
    with pytest.raises(StepFailure) as info:
        await runner.run(node, ctx, env)
    assert (info.value.info.code, info.value.retryable) == ("mcp_server_unknown", False)
