"""The ``condition`` node: pick the port of the first branch whose condition holds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agentflow.core import condition_explanations
from agentflow.core.graph.branching import DEFAULT_PORT, ConditionNode
from agentflow.core.node_specs import NodeSpec
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.nodes.base import BaseRunner, NodeEnv


class ConditionRunner(BaseRunner):
    """Test the branches in order; the step's input records which held and why."""

    kind = "condition"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """Choose a port; the output is the node's input, unchanged."""
        assert isinstance(node, ConditionNode)
        document = env.data()
        now = datetime.now(UTC)  # only for older_than / newer_than rules
        tested = []
        chosen = DEFAULT_PORT
        for branch in node.branches:
            explanation = condition_explanations.explain(branch.condition, document, now=now)
            tested.append({"port": branch.port, **explanation.to_json()})
            if explanation.matched:
                chosen = branch.port
                break
        return {"chosen": chosen, "tested": tested}, NodeResult(output=document["input"], port=chosen)
