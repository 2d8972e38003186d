"""The ``run_employee`` node's runner: find the employee, render the assignment, and hand the
employee's run to the checkpoint (spec in ``agentflow.core.graph.employee_nodes``)."""

from __future__ import annotations

from typing import Any

from agentflow.core import planner
from agentflow.core.definitions import EmployeeConfig
from agentflow.core.errors import StepFailure
from agentflow.core.graph.child_nodes import child_run_id, started_output
from agentflow.core.graph.employee_nodes import RESPONSE_SCHEMA, RunEmployeeNode
from agentflow.core.node_specs import NodeSpec
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.nodes.base import BaseRunner, NodeEnv
from agentflow.nodes.workflow_access import may_start_child


class RunEmployeeRunner(BaseRunner):
    """Start the employee's run and wait for its answer."""

    kind = "run_employee"

    def describe(self, node: NodeSpec) -> str | None:
        """The employee's name."""
        assert isinstance(node, RunEmployeeNode)
        return node.employee

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """The employee's run as the checkpoint inserts it, with ``{assignment, attachments,
        conversation_id}`` as its input; the step records them."""
        assert isinstance(node, RunEmployeeNode)
        access = await may_start_child(
            env.workflows, ctx.workspace_id, ctx.run_id, "run_employee", node.id, node.max_depth
        )
        callee = await access.callee(ctx.workspace_id, node.employee, None, node.id)
        if not isinstance(callee.config, EmployeeConfig):
            raise StepFailure(
                "not_an_employee",
                f"run_employee {node.id!r}: {node.employee!r} is a workflow of kind {callee.config.kind}",
                retryable=False,
                details={"node": node.id, "employee": node.employee},
                solution="Name a workflow of kind employee, or use run_workflow for other workflows.",
            )
        payload: dict[str, Any] = {
            "assignment": str(await env.render(node.assignment, node.id, "assignment"))
        }
        if node.attachments is not None:
            payload["attachments"] = await env.render(node.attachments, node.id, "attachments")
        conversation = None
        if node.conversation_id is not None:
            payload["conversation_id"] = str(
                await env.render(node.conversation_id, node.id, "conversation_id")
            )
            # The run records it too (GET /api/runs?conversation_id=...): a talk a workflow holds.
            conversation = {"id": payload["conversation_id"][:200], "channel": "workflow"}
        state = planner.initial_state(callee.config)
        if node.response_schema is not None:
            state[RESPONSE_SCHEMA] = node.response_schema
        child = child_run_id(ctx.run_id, ctx.step_seq)
        started = started_output(child, callee.name, callee.workflow_id, callee.version)
        child_run = {
            "id": str(child),
            "workflow_id": str(callee.workflow_id),
            "workflow_version": callee.version,
            "input": payload,
            "caller_node": node.id,
        }
        if conversation is not None:
            child_run["conversation"] = conversation
        result = NodeResult(output=started, child_state=state, child_run=child_run)
        return {**started, "input": payload}, result
