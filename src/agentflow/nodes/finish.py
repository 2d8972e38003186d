"""The ``finish`` node: complete the run with an output."""

from __future__ import annotations

from typing import Any

from agentflow.core.node_specs import FinishNode, NodeSpec
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.nodes.base import BaseRunner, NodeEnv


class FinishRunner(BaseRunner):
    """Render the output and end the run."""

    kind = "finish"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """The rendered output becomes the run's output."""
        assert isinstance(node, FinishNode)
        output = await env.render(node.output, node.id, "output")
        return None, NodeResult(output=output, finish=True)
