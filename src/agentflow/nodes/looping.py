"""The ``for_each`` node: render the list; the loop itself runs as child runs (see
``agentflow.core.loops``)."""

from __future__ import annotations

from typing import Any

from agentflow.core.errors import StepFailure
from agentflow.core.graph.looping import ForEachNode
from agentflow.core.node_specs import NodeSpec
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.nodes.base import BaseRunner, NodeEnv


class ForEachRunner(BaseRunner):
    """Check the list; its items become child runs in this step's checkpoint."""

    kind = "for_each"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """The items, checked: a list of at most ``max_items``."""
        assert isinstance(node, ForEachNode)
        items = await env.render_list(node.items, node.id, "items", code="loop_not_a_list", kind="for_each")
        if len(items) > node.max_items:
            raise StepFailure(
                "loop_too_large",
                f"for_each {node.id!r} got {len(items):,} items, over its max_items of {node.max_items:,}",
                retryable=False,
                details={"node": node.id, "items": len(items), "max_items": node.max_items},
                solution="Raise max_items (up to 100,000), or split the list.",
            )
        shown = {"items": len(items), "running": min(node.concurrency, len(items))}
        # No items: the loop is done at once, and its output is its (empty) results.
        return shown, NodeResult(output=shown if items else [], loop_items=items)
