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
from agentflow.core.graph.frontier import Activation
from agentflow.core.graph.looping import ForEachNode, LoopProgress
from agentflow.core.graph.output_params import shape_output
from agentflow.core.inbox import EMPTY, Inbox
from agentflow.core.node_specs import NodeSpec
from agentflow.core.payload_format import with_nested_keys
from agentflow.core.planner import NodeResult, Transition
from agentflow.core.records import RunRecord
from agentflow.core.statuses import RunStatus
from agentflow.core.step_context import StepContext
from agentflow.nodes.base import NodeEnv
from agentflow.nodes.registry import runner_for
from agentflow.nodes.rendering import call_rendering
from agentflow.runtime import tracing
from agentflow.store import json_codec
from agentflow.store.checkpoints import NO_EFFECTS, Checkpointed, Effects, ModelUsage, RunWrite, StepWrite

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
        counter = outcome.run.next_counter
        if not t.advances:
            held = self.step_seq if counter is None else counter
            return Cursor(state, held, self.attempt + 1, self.outputs, inbox, now)
        if outcome.step.node_id is not None:
            self.outputs[outcome.step.node_id] = outcome.step.output
        return Cursor(state, self.step_seq + 1 if counter is None else counter, 0, self.outputs, inbox, now)


@dataclass(frozen=True)
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
        # The step is the ending node's (a for_each, an agent), else the first waiting one's.
        kind = config.node(woke.node_id or state["loops"][0]["node"]).type
        return _outcome(t, cursor, attempt, woke.node_id, kind, None, None, output, t.error, 0.0, [])
    if activation is None:  # woken with nothing ready: a trailing wait is over, or timers remain
        transition = planner.on_nothing_ready(config, state, cursor.outputs)
        kind = "finish" if transition.status is RunStatus.COMPLETED else "timers"
        return _outcome(transition, cursor, attempt, None, kind, None, None, transition.output, None, 0.0, [])
    seq = cursor.step_seq if activation.seq is None else activation.seq
    ran = await run_activation(
        config,
        run,
        cursor if state is cursor.state else replace(cursor, state=state),
        activation,
        seq,
        activation.failures + attempt,
        tools_env,
        token,
    )
    # A number taken now (not given earlier beside others) moves the counter on.
    return await decide(config, state, ran, cursor, taken=int(activation.seq is None), concurrent=False)


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
        inbox=cursor.inbox,
        asked=activation.asked,
        template_context={
            "payload": with_nested_keys(run.input),
            "input": planner.node_input(config, activation, run.input, cursor.outputs),
            "steps": cursor.outputs,
            "state": planner.variables(cursor.state),
            "inbox": cursor.inbox.view(),
            "run": {"id": str(run.id), "workflow_id": str(run.workflow_id), "step": seq},
        },
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
            {"type": type(exc).__name__, "traceback": traceback.format_exc(limit=8)[-4000:]},
        )
        retryable, result = True, NodeResult()
    tasks = [_task_doc(t) for t in ctx.tasks] if failure is None else []
    duration = time.monotonic() - started
    return Ran(
        activation, node, seq, attempt, name, step_input, result, failure, retryable, env, tasks, duration,
        cursor.inbox,
    )  # fmt: skip


async def decide(
    config: StructuredConfig,
    state: dict[str, Any],
    ran: Ran,
    cursor: Cursor,
    *,
    taken: int,
    concurrent: bool,
) -> StepOutcome:
    """How ``ran`` moves the run whose state is now ``state``, as a checkpoint to write.

    ``taken``: step numbers handed out since the run's counter was stored (this one's,
    and those of activations running beside it). ``concurrent``: the run's activations run
    at once (``agentflow.runtime.branches``): a failed attempt retries on its own while the
    run goes on, and the counter moves past every number handed out.
    """
    node, result, failure, retryable = ran.node, ran.result, ran.failure, ran.retryable
    if failure is None and node.save_to_state:
        try:
            # Saved in this step's own checkpoint (the state document), so no extra write.
            state = await call_rendering(
                planner.save_to_state, config, state, node, ran.env.template_context, result.output
            )
        except StepFailure as exc:
            failure, retryable, result = exc.info, exc.retryable, NodeResult()
    if failure is None:
        if result.loop_items is not None and isinstance(node, ForEachNode):
            transition = loops.on_loop_start(config, state, node, result.loop_items, ran.seq, ran.activation)
        elif result.park_secs is not None:
            asked = ran.seq if ran.activation.asked is None else ran.activation.asked
            transition = planner.park_for_answer(
                config, state, ran.activation, asked, result.park_secs, result.output
            )
        elif result.child_state is not None and result.child_waits:
            transition = loops.on_child_start(
                config, state, result.child_state, ran.seq, ran.activation, result.output, result.child_run
            )
        elif result.child_state is not None:
            moved_on = planner.on_success(config, state, node, result, ran.activation)
            transition = loops.detached_child(moved_on, result.child_state, result.child_run or {})
        else:
            transition = planner.on_success(config, state, node, result, ran.activation)
        error = None
    else:
        transition, error = _failed(config, ran, state, failure, retryable, concurrent)
    output = transition.step_output if transition.handled else result.output if transition.advances else None
    counter = cursor.step_seq + (taken if transition.advances or concurrent else 0)
    outcome = _outcome(
        transition,
        cursor,
        ran.attempt,
        node.id,
        node.type,
        ran.name,
        ran.step_input,
        output,
        error,
        ran.duration,
        ran.tasks if failure is None else [],
        seq=ran.seq,
        next_counter=counter,
        usage=_usage(ran.env),
        request=result.request if failure is None else None,
        notifications=list(result.notifications) if failure is None else [],
    )
    completed = transition.step_status == "completed"
    used = result.consumed if result.consumed is not None else () if result.passes_inbox else ran.inbox.ids
    return _with_inbox(outcome, ran.inbox, used if completed else ())


def _with_inbox(outcome: StepOutcome, inbox: Inbox, consumed: tuple[int, ...]) -> StepOutcome:
    """Tell the checkpoint what the step saw of the inbox: it consumes the rows the step
    used (exactly once, fenced), and compares the delivery count it saw."""
    return replace(outcome, run=replace(outcome.run, inbox_seen=inbox.seen, consumed=consumed))


def _failed(
    config: StructuredConfig,
    ran: Ran,
    state: dict[str, Any],
    info: ErrorInfo,
    retryable: bool,
    concurrent: bool,
) -> tuple[Transition, ErrorInfo]:
    policy = planner.retry_policy(config, ran.node)
    if concurrent and retryable and policy.allows_another(ran.attempt):
        delay = policy.delay_honouring(ran.attempt, _rand.random, info.details.get("retry_after"))
        return planner.retry_beside_others(config, state, ran.activation, ran.attempt, delay, info), info
    transition = planner.on_failure(policy, state, ran.attempt, info, retryable, _rand.random)
    if transition.status is RunStatus.FAILED and transition.error is not None:
        handled = planner.on_handled_failure(config, state, ran.node, transition.error, ran.activation)
        if handled is not None:
            return handled, transition.error
        fresh = planner.with_fresh_budget(config, state, ran.activation)
        return replace(transition, state=fresh), info
    return transition, info


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
    *,
    seq: int | None = None,
    next_counter: int | None = None,
    usage: ModelUsage | None = None,
    request: dict[str, Any] | None = None,
    notifications: list[dict[str, Any]] | None = None,
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
        counter=cursor.step_seq,
        next_counter=next_counter,
    )
    step = StepWrite(
        seq=cursor.step_seq if seq is None else seq,
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
        usage=usage,
        approval=request,
        notifications=notifications or [],
    )
    return StepOutcome(transition, run, step, effects)


def _usage(env: NodeEnv) -> ModelUsage | None:
    """What the step spent on models, failed attempts included (their tokens were paid for)."""
    if not env.spent:
        return None
    spent = sum(env.spent[1:], env.spent[0])
    usage = spent.usage
    return ModelUsage(
        spent.model,
        usage.input_tokens,
        usage.output_tokens,
        usage.cached_input_tokens,
        spent.usd,
        spent.calls,
    )


def _task_doc(task: Any) -> dict[str, Any]:
    doc = asdict(task)
    if doc.get("due_at") is not None:
        doc["due_at"] = doc["due_at"].isoformat()
    return doc
