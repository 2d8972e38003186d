"""Run one activation of a graph run once: its node's runner, with its timeout, in a span of
its own when traces are on; the result (``Ran``) is what ``step.decide`` turns into a
checkpoint.

Nothing here writes to the database.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from agentflow.core import planner
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ErrorInfo, StepFailure
from agentflow.core.frozen import frozen
from agentflow.core.graph.frontier import Activation
from agentflow.core.graph.output_params import shape_output
from agentflow.core.inbox import Inbox
from agentflow.core.node_specs import NodeSpec
from agentflow.core.payload_format import with_nested_keys
from agentflow.core.records import RunRecord
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.core.templating.lazy_context import LazyContext
from agentflow.nodes.base import NodeEnv
from agentflow.nodes.registry import runner_for
from agentflow.runtime import tracing
from agentflow.runtime.deadlines import within
from agentflow.store import json_codec

if TYPE_CHECKING:  # the cursor is step's; only its fields are read here
    from agentflow.runtime.step import Cursor


@frozen
class Ran:
    """One attempt of one activation, before how it moves the run is decided.

    Attributes:
        activation / node: what ran.
        seq / attempt: its step number and attempt number.
        name: the step's display name.
        step_input: what it recorded as its input.
        result: its result (empty when it failed).
        failure / retryable: why it failed, and whether another attempt may help.
        env: the template context it ran with (``save_to_state`` renders in it).
        tasks: tasks it asked for.
        duration: seconds it took.
        inbox: the run's inbox as the step saw it.
    """

    activation: Activation
    node: NodeSpec
    seq: int
    attempt: int
    name: str | None
    step_input: Any
    result: NodeResult
    failure: ErrorInfo | None
    retryable: bool
    env: NodeEnv
    tasks: list[dict[str, Any]]
    duration: float
    inbox: Inbox


async def run_activation(
    config: StructuredConfig,
    run: RunRecord,
    cursor: Cursor,
    activation: Activation,
    seq: int,
    attempt: int,
    tools_env: NodeEnv,
    token: int,
) -> Ran:
    """Run ``activation`` once as step ``seq``, attempt ``attempt``, with its timeout, in a
    span of its own when traces are on."""
    args = (config, run, cursor, activation, seq, attempt, tools_env, token)
    if not tracing.enabled():
        return await _run_activation(*args)
    with tracing.step_span(run, seq, attempt, config.node(activation.node).type, activation.node) as span:
        ran = await _run_activation(*args)
        tracing.name_step(span, ran.node.type, ran.name, ran.failure.code if ran.failure else None)
        return ran


async def _run_activation(
    config: StructuredConfig,
    run: RunRecord,
    cursor: Cursor,
    activation: Activation,
    seq: int,
    attempt: int,
    tools_env: NodeEnv,
    token: int,
) -> Ran:
    node = config.node(activation.node)
    ctx = StepContext(
        workspace_id=run.workspace_id,
        run_id=run.id,
        workflow_id=run.workflow_id,
        step_seq=seq,
        attempt=attempt,
        fencing_token=token,
        payload=run.input if isinstance(run.input, dict) else {"value": run.input},
    )
    env = NodeEnv(
        tools_env.tools,
        tools_env.threads,
        models=tools_env.models,
        http=tools_env.http,
        mcp=tools_env.mcp,
        mcp_servers=tuple(config.mcp_servers or ()),
        attached=config.graph.attached,
        code=tools_env.code,
        credentials=tools_env.credentials,
        workflows=tools_env.workflows,
        public_url=tools_env.public_url,
        people=tools_env.people,
        reply_to=tools_env.reply_to,
        inbox=cursor.inbox,
        asked=activation.asked,
        spend=cursor.fresh_spend(),
        template_context=LazyContext(
            {
                "payload": lambda: with_nested_keys(run.input),
                "input": lambda: planner.node_input(config, activation, run.input, cursor.outputs),
                "steps": lambda: cursor.outputs,
                "state": lambda: planner.variables(cursor.state),
                "inbox": cursor.inbox.view,
                "run": lambda: {
                    "id": str(run.id),
                    "workflow_id": str(run.workflow_id),
                    "step": seq,
                    "account_id": run.account_id,
                },
            }
        ),
    )
    started = time.monotonic()
    step_input: Any = None
    name: str | None = None
    failure: ErrorInfo | None = None
    retryable = False
    result = NodeResult()
    try:
        runner = runner_for(node.type)
        name = runner.describe(node)
        timeout = planner.step_timeout(config, node, runner.timeout_override(node, env))
        try:
            step_input, result = await within(runner.run(node, ctx, env), timeout)
        except TimeoutError:
            raise StepFailure(
                "step_timeout",
                f"step {node.id!r} did not finish within {timeout:g}s",
                solution="Make the step faster or raise its 'timeout'.",
            ) from None
        if node.output_params:
            result = replace(result, output=shape_output(node.id, node.output_params, result.output))
        json_codec.encode(result.output)  # refuse what jsonb cannot store, as a step failure
        json_codec.encode(step_input)
    except StepFailure as exc:
        failure, retryable, result = exc.info, exc.retryable, NodeResult()
    except json_codec.UnstorableJson as exc:
        failure = ErrorInfo(
            "output_not_storable",
            f"step {node.id!r} returned a value that cannot be stored: {exc}",
            solution="Return JSON data (dicts, lists, strings, numbers) without NUL characters.",
        )
        result, step_input = NodeResult(), None
    except Exception as exc:  # a tool's own bug or outage: retry per policy
        failure = ErrorInfo(
            "step_exception",
            f"{type(exc).__name__}: {exc}",
            # The innermost frames: where the tool broke, not the engine's calls down to it.
            {"type": type(exc).__name__, "traceback": traceback.format_exc(limit=-8)[-4000:]},
        )
        retryable, result = True, NodeResult()
    tasks = [_task_doc(t) for t in ctx.tasks] if failure is None else []
    duration = time.monotonic() - started
    return Ran(
        activation, node, seq, attempt, name, step_input, result, failure, retryable, env, tasks, duration,
        cursor.inbox,
    )  # fmt: skip


def _task_doc(task: Any) -> dict[str, Any]:
    doc = asdict(task)
    if doc.get("due_at") is not None:
        doc["due_at"] = doc["due_at"].isoformat()
    return doc
