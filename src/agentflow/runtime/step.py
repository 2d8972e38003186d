"""Execute one step attempt of a claimed run and describe its checkpoint.

Nothing here writes to the database: the worker checkpoints what this returns.
"""

from __future__ import annotations

import asyncio
import random
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from agentflow.core import loops, planner
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ErrorInfo, StepFailure
from agentflow.core.graph.looping import ForEachNode, LoopProgress
from agentflow.core.graph.output_params import shape_output
from agentflow.core.inbox import EMPTY, Inbox
from agentflow.core.payload_format import with_nested_keys
from agentflow.core.planner import NodeResult, Transition
from agentflow.core.records import RunRecord
from agentflow.core.statuses import RunStatus
from agentflow.core.step_context import StepContext
from agentflow.nodes.base import NodeEnv
from agentflow.nodes.registry import runner_for
from agentflow.nodes.rendering import call_rendering
from agentflow.store import json_codec
from agentflow.store.checkpoints import NO_EFFECTS, Checkpointed, Effects, RunWrite, StepWrite

_rand = random.Random()


@dataclass(frozen=True)
class StepOutcome:
    """What the checkpoint of one attempt writes."""

    transition: Transition
    run: RunWrite
    step: StepWrite
    effects: Effects = NO_EFFECTS


@dataclass(frozen=True)
class Cursor:
    """Where a held run is between steps (it changes only at checkpoints).

    Attributes:
        state: the run's state document (``{"node": ..., "vars": {...}}``).
        step_seq: the current step's number.
        attempt: failed attempts of the current step.
        outputs: outputs of completed steps by node id, for templates; the worker keeps
            them while it holds the run (they are stored in ``run_steps``).
        inbox: the run's unconsumed deliveries as last loaded (``{{ inbox }}``); the worker
            loads them when it claims the run and after a checkpoint that reports new ones.
        now: the database's time at the claim or the last checkpoint (timers are released
            by it, never by the worker's clock).
        loops: how far each running loop's items are (by the loop's step), as the worker
            counted them before this step.
    """

    state: dict[str, Any]
    step_seq: int
    attempt: int
    outputs: dict[str, Any]
    inbox: Inbox = EMPTY
    now: datetime | None = None
    loops: dict[int, LoopProgress] = field(default_factory=dict)

    @classmethod
    def of(cls, run: RunRecord, outputs: dict[str, Any], inbox: Inbox = EMPTY) -> Cursor:
        """The cursor of a freshly claimed run (the claim set ``updated_at`` to the database's
        time), with the outputs of its completed steps."""
        return cls(run.state, run.step_seq, run.attempt, outputs, inbox, run.updated_at)

    def after(self, outcome: StepOutcome, done: Checkpointed | None = None) -> Cursor:
        """The cursor after ``outcome`` was checkpointed (``done``: what the checkpoint returned)."""
        t = outcome.transition
        inbox = self.inbox.consumed() if outcome.run.consumed else self.inbox
        state, now = t.state, self.now
        if done is not None:
            now = done.db_now or now
            if done.timers is not None:  # the checkpoint stamped new timers with its clock
                state = {**state, "timers": done.timers}
        if not t.advances:
            return Cursor(state, self.step_seq, self.attempt + 1, self.outputs, inbox, now)
        if outcome.step.node_id is not None:
            self.outputs[outcome.step.node_id] = outcome.step.output
        return Cursor(state, self.step_seq + 1, 0, self.outputs, inbox, now)


async def execute(
    config: StructuredConfig,
    run: RunRecord,
    cursor: Cursor,
    tools_env: NodeEnv,
    token: int,
) -> StepOutcome:
    """Run the next ready activation once, with its timeout, and decide how the run moves."""
    state = planner.released(config, cursor.state, cursor.now, inbox_news=bool(cursor.inbox.view()))
    activation = planner.current_activation(config, state)
    attempt = cursor.attempt + 1
    if activation is None and "loops" in state:  # loops running: count, release, join
        woke = loops.on_loop_wake(config, state, cursor.loops)
        t = woke.transition
        output = t.step_output if t.handled else woke.output
        return _outcome(t, cursor, attempt, woke.node_id, "for_each", None, None, output, t.error, 0.0, [])
    if activation is None:  # woken with nothing ready: a trailing wait is over, or timers remain
        transition = planner.on_nothing_ready(config, state, cursor.outputs)
        kind = "finish" if transition.status is RunStatus.COMPLETED else "timers"
        return _outcome(transition, cursor, attempt, None, kind, None, None, transition.output, None, 0.0, [])
    node = config.node(activation.node)
    ctx = StepContext(
        workspace_id=run.workspace_id,
        run_id=run.id,
        workflow_id=run.workflow_id,
        step_seq=cursor.step_seq,
        attempt=attempt,
        fencing_token=token,
        payload=run.input if isinstance(run.input, dict) else {"value": run.input},
    )
    env = NodeEnv(
        tools_env.tools,
        tools_env.threads,
        {
            "payload": with_nested_keys(run.input),
            "input": planner.node_input(config, activation, run.input, cursor.outputs),
            "steps": cursor.outputs,
            "state": planner.variables(state),
            "inbox": cursor.inbox.view(),
            "run": {
                "id": str(run.id),
                "workflow_id": str(run.workflow_id),
                "step": cursor.step_seq,
            },
        },
    )
    started = time.monotonic()
    step_input: Any = None
    name: str | None = None
    try:
        runner = runner_for(node.type)
        name = runner.describe(node)
        timeout = planner.step_timeout(config, node, runner.timeout_override(node, env))
        try:
            async with asyncio.timeout(timeout):
                step_input, result = await runner.run(node, ctx, env)
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
        # Saved in this step's own checkpoint (the state document), so no extra write.
        state = await call_rendering(
            planner.save_to_state, config, state, node, env.template_context, result.output
        )
        if result.loop_items is not None and isinstance(node, ForEachNode):
            transition = loops.on_loop_start(config, state, node, result.loop_items, cursor.step_seq)
        else:
            transition = planner.on_success(config, state, node, result)
        error = None
        tasks = [_task_doc(t) for t in ctx.tasks]
    except StepFailure as failure:
        transition, error, tasks = _failed(config, node, cursor, state, failure.info, failure.retryable)
        result = NodeResult()
    except json_codec.UnstorableJson as exc:
        info = ErrorInfo(
            "output_not_storable",
            f"step {node.id!r} returned a value that cannot be stored: {exc}",
            solution="Return JSON data (dicts, lists, strings, numbers) without NUL characters.",
        )
        transition, error, tasks = _failed(config, node, cursor, state, info, False)
        result, step_input = NodeResult(), None
    except Exception as exc:  # a tool's own bug or outage: retry per policy
        info = ErrorInfo(
            "step_exception",
            f"{type(exc).__name__}: {exc}",
            {"type": type(exc).__name__, "traceback": traceback.format_exc(limit=8)[-4000:]},
        )
        transition, error, tasks = _failed(config, node, cursor, state, info, True)
        result = NodeResult()
    duration = time.monotonic() - started
    output = transition.step_output if transition.handled else result.output if transition.advances else None
    outcome = _outcome(
        transition,
        cursor,
        attempt,
        node.id,
        node.type,
        name,
        step_input,
        output,
        error,
        duration,
        tasks,
    )
    return _with_inbox(
        outcome, cursor.inbox, consumes=transition.step_status == "completed" and not result.passes_inbox
    )


def _with_inbox(outcome: StepOutcome, inbox: Inbox, *, consumes: bool) -> StepOutcome:
    """Tell the checkpoint what the step saw of the inbox: it consumes the rows (exactly once,
    fenced) when the step completed and used them, and compares the delivery count it saw."""
    consumed = inbox.ids if consumes else ()
    return replace(outcome, run=replace(outcome.run, inbox_seen=inbox.seen, consumed=consumed))


def _failed(
    config: StructuredConfig,
    node: Any,
    cursor: Cursor,
    state: dict[str, Any],
    info: ErrorInfo,
    retryable: bool,
) -> tuple[Transition, ErrorInfo, list[dict[str, Any]]]:
    policy = planner.retry_policy(config, node)
    transition = planner.on_failure(policy, state, cursor.attempt + 1, info, retryable, _rand.random)
    if transition.status is RunStatus.FAILED and transition.error is not None:
        handled = planner.on_handled_failure(config, state, node, transition.error)
        if handled is not None:
            return handled, transition.error, []
    return transition, info, []


def _outcome(
    transition: Transition,
    cursor: Cursor,
    attempt: int,
    node_id: str | None,
    kind: str,
    name: str | None,
    step_input: Any,
    output: Any,
    error: ErrorInfo | None,
    duration: float,
    tasks: list[dict[str, Any]],
) -> StepOutcome:
    run_error = transition.error.to_json() if transition.error else None
    run = RunWrite(
        status=transition.status.value,
        status_reason=transition.reason,
        state=transition.state,
        output=transition.output if transition.status.is_terminal else None,
        error=run_error,
        advance=transition.advances,
        wake_after=transition.wake_after.total_seconds() if transition.wake_after else None,
        wake_at=transition.wake_at,
    )
    step = StepWrite(
        seq=cursor.step_seq,
        attempt=attempt,
        node_id=node_id,
        kind=kind,
        name=name,
        status=transition.step_status,
        input=step_input,
        output=output,
        error=error.to_json() if error else None,
        duration=duration,
    )
    effects = Effects(
        tasks=tasks,
        children=list(transition.children),
        release=list(transition.release),
        cancel_loops=list(transition.cancel_loops),
    )
    return StepOutcome(transition, run, step, effects)


def _task_doc(task: Any) -> dict[str, Any]:
    doc = asdict(task)
    if doc.get("due_at") is not None:
        doc["due_at"] = doc["due_at"].isoformat()
    return doc
