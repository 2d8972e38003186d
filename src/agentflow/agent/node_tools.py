"""Action nodes as an agent's tools: a call runs the node kind's own runner, as one step of the
agent's run (the rules are in ``agentflow.core.graph.agent_tools``).

The node's templates see the model's arguments as ``args``, the run's input as ``payload`` and
the run as ``run``. What the runner returns is the call's result; the tasks and outbox messages
it makes are written by the step's checkpoint, exactly once, as for any agent tool. The step's
idempotency key (``run_id:seq``) is the node's, so an HTTP request carries the same
``Idempotency-Key`` and a message the same id on every attempt.

A ``run_workflow`` node starts its child with the step's checkpoint (the child's id derives
from the step, so a retried step starts the same child, or none); with ``wait`` the agent waits
for it, holding no worker, and the child's output is the call's result (``agent.loop``).
"""

from __future__ import annotations

from typing import Any

from agentflow.agent.calls import CallContext, ToolOutcome
from agentflow.core.graph.output_params import shape_output
from agentflow.core.node_specs import NodeSpec
from agentflow.core.payload_format import with_nested_keys
from agentflow.core.step_context import StepContext
from agentflow.nodes.base import NodeEnv
from agentflow.nodes.registry import runner_for


def node_tool(ctx: CallContext, name: str) -> NodeSpec | None:
    """The attached node the call ``name`` runs, if it is one."""
    return next((node for node in ctx.config.node_tools if node.id == name), None)


async def call_node(ctx: CallContext, node: NodeSpec, arguments: dict[str, Any]) -> ToolOutcome:
    """Run ``node`` once with the model's ``arguments``.

    Raises:
        StepFailure: as the node's runner raises it (retryable ones retry the step; the model
            is told of the others).
    """
    run = ctx.run
    step = StepContext(
        workspace_id=run.workspace_id,
        run_id=run.id,
        workflow_id=run.workflow_id,
        step_seq=ctx.seq,
        attempt=ctx.attempt,
        fencing_token=ctx.token,
        payload=run.input if isinstance(run.input, dict) else {"value": run.input},
    )
    env = NodeEnv(
        ctx.env.tools,
        ctx.env.threads,
        template_context={
            "args": arguments,
            "payload": with_nested_keys(run.input),
            "run": {"id": str(run.id), "workflow_id": str(run.workflow_id), "step": ctx.seq},
        },
        http=ctx.env.http,
        mcp=ctx.env.mcp,
        mcp_servers=tuple(ctx.config.mcp_servers or ()),
        credentials=ctx.env.credentials,
        public_url=ctx.env.public_url,
        reply_to=ctx.env.reply_to,
        workflows=ctx.env.workflows,
    )
    _, result = await runner_for(node.type).run(node, step, env)
    output = result.output
    if result.child_state is not None:
        child = {**(result.child_run or {}), "state": result.child_state}
        return ToolOutcome(result=output, child=child, child_waits=result.child_waits)
    if node.output_params:
        output = shape_output(node.id, node.output_params, output)
    tasks = [{**t.__dict__, "due_at": t.due_at.isoformat() if t.due_at else None} for t in step.tasks]
    return ToolOutcome(result=output, tasks=tasks, notifications=list(result.notifications))
