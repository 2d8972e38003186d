"""The ``tool`` node: call a registered Python tool."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from agentflow.core.errors import StepFailure
from agentflow.core.node_specs import NodeSpec, ToolNode
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.nodes.base import NodeEnv


class ToolRunner:
    """Render the args, validate them against the tool's signature, call the tool."""

    kind = "tool"

    def describe(self, node: NodeSpec) -> str | None:
        """The tool's name."""
        assert isinstance(node, ToolNode)
        return node.tool

    def timeout_override(self, node: NodeSpec, env: NodeEnv) -> timedelta | None:
        """The tool's own timeout, if it declared one."""
        assert isinstance(node, ToolNode)
        return env.tools.get(node.tool).timeout

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """Call the tool; its return value is the step's output."""
        assert isinstance(node, ToolNode)
        spec = env.tools.get(node.tool)
        args = await env.render(node.args, node.id, "args")
        try:
            kwargs = spec.validate_args(args)
        except StepFailure as failure:  # name the node too: the same tool may serve several
            info = failure.info
            raise StepFailure(
                info.code,
                f"node {node.id!r}: {info.message}",
                retryable=False,
                details={**info.details, "node": node.id},
                solution=info.solution,
            ) from None
        if spec.wants_context:
            kwargs["ctx"] = ctx
        if spec.is_async:
            output = await spec.fn(**kwargs)
        else:
            output = await env.call_sync(spec.fn, **kwargs)
        return args, NodeResult(output=output)
