"""Node runners by kind."""

from __future__ import annotations

from agentflow.core.errors import StepFailure
from agentflow.nodes.base import NodeRunner
from agentflow.nodes.finish import FinishRunner
from agentflow.nodes.tool import ToolRunner
from agentflow.nodes.wait import WaitRunner

RUNNERS: dict[str, NodeRunner] = {r.kind: r for r in (ToolRunner(), WaitRunner(), FinishRunner())}


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
