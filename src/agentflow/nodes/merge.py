"""The ``merge`` node: combine the outputs of the branches that joined."""

from __future__ import annotations

from typing import Any

from agentflow.core.errors import StepFailure
from agentflow.core.graph.joining import MergeNode, deep_merge
from agentflow.core.node_specs import NodeSpec
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.nodes.base import BaseRunner, NodeEnv


class MergeRunner(BaseRunner):
    """Combine ``input`` (the joined outputs by predecessor id, in arrival order)."""

    kind = "merge"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """The combined outputs; the step's input names the branches that joined."""
        assert isinstance(node, MergeNode)
        joined: dict[str, Any] = env.template_context.get("input") or {}
        shown = {"joined": list(joined)}
        if node.combine == "object":
            return shown, NodeResult(output=joined)
        if node.combine == "list":
            return shown, NodeResult(output=list(joined.values()))
        merged: dict[str, Any] = {}
        for source, output in joined.items():
            if not isinstance(output, dict):
                raise StepFailure(
                    "merge_not_objects",
                    f"node {node.id!r} cannot deep-merge the output of {source!r}: "
                    f"it is {type(output).__name__}, not an object",
                    retryable=False,
                    details={"node": node.id, "from": source},
                    solution="Use combine: object or list, or make every branch end with an object.",
                )
            merged = deep_merge(merged, output)
        return shown, NodeResult(output=merged)
