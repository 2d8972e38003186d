"""Node runners by kind."""

from __future__ import annotations

from typing import Any

from agentflow.core.errors import StepFailure
from agentflow.core.graph.catalog import describe_kinds
from agentflow.core.node_specs import NODE_SPECS
from agentflow.nodes.agent_node import AgentNodeRunner
from agentflow.nodes.base import NodeRunner
from agentflow.nodes.condition import ConditionRunner
from agentflow.nodes.data import FilterRunner, MappingRunner, SortRunner, SplitRunner
from agentflow.nodes.finish import FinishRunner
from agentflow.nodes.http_request import HttpRequestRunner
from agentflow.nodes.llm import LlmRunner
from agentflow.nodes.looping import ForEachRunner
from agentflow.nodes.mcp_tool import McpToolRunner
from agentflow.nodes.merge import MergeRunner
from agentflow.nodes.run_code import RunCodeRunner
from agentflow.nodes.run_employee import RunEmployeeRunner
from agentflow.nodes.run_workflow import RunWorkflowRunner
from agentflow.nodes.send_message import SendMessageRunner
from agentflow.nodes.tool import ToolRunner
from agentflow.nodes.user_input import UserInputRunner
from agentflow.nodes.wait import WaitRunner
from agentflow.nodes.wait_callback import WaitCallbackRunner

RUNNERS: dict[str, NodeRunner] = {
    r.kind: r
    for r in (
        ToolRunner(),
        WaitRunner(),
        FinishRunner(),
        ConditionRunner(),
        MergeRunner(),
        ForEachRunner(),
        MappingRunner(),
        FilterRunner(),
        SortRunner(),
        SplitRunner(),
        LlmRunner(),
        AgentNodeRunner(),
        HttpRequestRunner(),
        McpToolRunner(),
        UserInputRunner(),
        RunCodeRunner(),
        SendMessageRunner(),
        RunWorkflowRunner(),
        RunEmployeeRunner(),
        WaitCallbackRunner(),
    )
}


def register_runner(runner: NodeRunner) -> NodeRunner:
    """Add a node kind's runner (its spec registers with ``core.node_specs.register_node_spec``)."""
    RUNNERS[runner.kind] = runner
    return runner


def runnable_kinds() -> list[str]:
    """The node kinds this worker can both validate and run (or that work only attached to an
    agent, which runs them itself), by name."""
    return sorted(kind for kind in NODE_SPECS if kind in RUNNERS or NODE_SPECS[kind].attached_only)


def node_kinds() -> list[dict[str, Any]]:
    """Every kind this worker can run, described (see ``agentflow.core.graph.catalog``)."""
    return describe_kinds({kind: NODE_SPECS[kind] for kind in runnable_kinds()})


def runner_for(kind: str) -> NodeRunner:
    """The runner of a node kind.

    Raises:
        StepFailure: code ``unknown_node_kind`` (not retryable).
    """
    try:
        return RUNNERS[kind]
    except KeyError:
        raise StepFailure(
            "unknown_node_kind",
            f"this worker has no runner for node type {kind!r}",
            retryable=False,
            solution="Upgrade the worker to a version that supports this node type.",
        ) from None
