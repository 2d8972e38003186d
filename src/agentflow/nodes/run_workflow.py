"""The ``run_workflow`` node's runner: find the workflow, render the child's input, and hand
the child run to the checkpoint (spec and how the parent waits in
``agentflow.core.graph.child_nodes``).

The child's id is derived from the step (``child_run_id``), so every attempt of the step names
the same run and the checkpoint inserts it at most once.
"""

from __future__ import annotations

from typing import Any

from agentflow.core import planner
from agentflow.core.errors import ConfigError, StepFailure
from agentflow.core.graph.child_nodes import RunWorkflowNode, child_run_id, started_output
from agentflow.core.node_specs import NodeSpec
from agentflow.core.starts import check_payload
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.nodes.base import BaseRunner, NodeEnv
from agentflow.nodes.workflow_access import may_start_child


class RunWorkflowRunner(BaseRunner):
    """Start a run of another workflow, waited for or on its own."""

    kind = "run_workflow"

    def describe(self, node: NodeSpec) -> str | None:
        """The workflow, and its version when the node names one (``billing@3``)."""
        assert isinstance(node, RunWorkflowNode)
        return node.workflow if node.version is None else f"{node.workflow}@{node.version}"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """The child as the checkpoint inserts it; the step records the workflow, version and
        input, and outputs the child's id (the node's output when it does not wait)."""
        assert isinstance(node, RunWorkflowNode)
        access = await may_start_child(
            env.workflows, ctx.workspace_id, ctx.run_id, "run_workflow", node.id, node.max_depth
        )
        callee = await access.callee(ctx.workspace_id, node.workflow, node.version, node.id)
        payload = {} if node.input is None else await env.render(node.input, node.id, "input")
        try:
            check_payload(callee.config, payload)
        except ConfigError as exc:
            raise StepFailure(
                "child_payload_invalid",
                f"run_workflow {node.id!r}: {exc.info.message}",
                retryable=False,
                details={"node": node.id, **(exc.info.details or {})},
                solution="Render an input that matches the child workflow's payload_format.",
            ) from None
        child = child_run_id(ctx.run_id, ctx.step_seq)
        started = started_output(child, callee.name, callee.workflow_id, callee.version)
        child_run = {
            "id": str(child),
            "workflow_id": str(callee.workflow_id),
            "workflow_version": callee.version,
            "input": payload,
            "caller_node": node.id,
        }
        result = NodeResult(
            output=started,
            child_state=planner.initial_state(callee.config),
            child_run=child_run,
            child_waits=node.wait,
        )
        return {**started, "input": payload, "wait": node.wait}, result
