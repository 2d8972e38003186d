"""The ``agent`` node's runner: render the prompt and hand the agent its own child run (spec
and how the child runs in ``agentflow.core.graph.agent_nodes``)."""

from __future__ import annotations

from typing import Any

from agentflow.core.agent_memory import checked_key
from agentflow.core.graph.agent_nodes import AgentNode, attached_memory
from agentflow.core.node_specs import NodeSpec
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.nodes.base import BaseRunner, NodeEnv


class AgentNodeRunner(BaseRunner):
    """Start the agent: its decisions and tool calls are steps of the child run."""

    kind = "agent"

    def describe(self, node: NodeSpec) -> str | None:
        """The model the agent uses (``default`` when the node names none)."""
        assert isinstance(node, AgentNode)
        return node.model or "default"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """The rendered prompt goes into the child's state; the step records it."""
        assert isinstance(node, AgentNode)
        rendered = await env.render(node.prompt, node.id, "prompt")
        prompt = rendered if isinstance(rendered, str) else str(rendered)
        shown: dict[str, Any] = {"prompt": prompt}
        memory = attached_memory(env.attached, node)
        key = None
        if memory is not None:
            key = checked_key(await env.render(memory.key, memory.id, "key"))
            shown["memory_key"] = key
        return shown, NodeResult(output={"started": True}, child_state=node.child_state(prompt, key))
