"""The ``finish`` node: complete the run with an output."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from agentflow.core.node_specs import FinishNode, NodeSpec
from agentflow.core.planner import NodeResult
from agentflow.core.step_context import StepContext
from agentflow.core.templating import render
from agentflow.nodes.base import NodeEnv


class FinishRunner:
    """Render the output and end the run."""

    kind = "finish"

    def describe(self, node: NodeSpec) -> str | None:
        """No extra name."""
        return None

    def timeout_override(self, node: NodeSpec, env: NodeEnv) -> timedelta | None:
        """No override."""
        return None

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """The rendered output becomes the run's output."""
        assert isinstance(node, FinishNode)
        output = render(node.output, env.template_context)
        return None, NodeResult(output=output, finish=True)
