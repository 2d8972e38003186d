"""Execute one step attempt of a claimed run and describe its checkpoint: the activation runs
(``runtime.activation``), then ``decide`` says how it moves the run.

Nothing here writes to the database: the worker checkpoints what this returns.
"""

from __future__ import annotations

import random
import time
from dataclasses import field, replace
from datetime import datetime
from typing import Any

from agentflow.core import loops, planner
from agentflow.core.agent_context import HistoryStep
from agentflow.core.agent_knowledge import FRESH_SECS, AgentKnowledge
from agentflow.core.agent_state import WorkspaceSpend
from agentflow.core.definitions import StructuredConfig
from agentflow.core.errors import ErrorInfo, StepFailure
from agentflow.core.frozen import frozen
from agentflow.core.graph.looping import ForEachNode, LoopProgress
from agentflow.core.inbox import EMPTY, Inbox
from agentflow.core.records import RunRecord
from agentflow.core.statuses import RunStatus
from agentflow.core.step_results import NodeResult, Transition
from agentflow.nodes.base import NodeEnv
from agentflow.nodes.rendering import call_rendering
from agentflow.runtime.activation import Ran as Ran
from agentflow.runtime.activation import run_activation as run_activation
from agentflow.store import json_codec
from agentflow.store.checkpoints import NO_EFFECTS, Checkpointed, Effects, ModelUsage, RunWrite, StepWrite

_rand = random.Random()


@frozen
class StepOutcome:
    """What the checkpoint of one attempt writes (``knowledge``: what an agent step knew of
    its run, for the worker to keep with what the checkpoint adds)."""

    transition: Transition
    run: RunWrite
    step: StepWrite
    effects: Effects = NO_EFFECTS
    knowledge: AgentKnowledge | None = None


@frozen
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
        spend: the workspace's model spend today and its limits as the run's last checkpoint
            with a model call returned them, with the worker's monotonic time then; None
            before one.
        agent: what an agent run's next decision needs, as the worker knows it (None until
            its first decision after the claim read it).
        children_seen: the run's count of ended child runs as the last count of its loops
            read it (None before one): a checkpoint that makes it wait is due at once when a
            child ended since.
    """

    state: dict[str, Any]
    step_seq: int
    attempt: int
    outputs: dict[str, Any]
    inbox: Inbox = EMPTY
    now: datetime | None = None
    loops: dict[int, LoopProgress] = field(default_factory=dict)
    spend: tuple[WorkspaceSpend, float] | None = None
    agent: AgentKnowledge | None = None
    children_seen: int | None = None

    def fresh_spend(self) -> WorkspaceSpend | None:
        """The spend of ``spend`` while it is at most ``FRESH_SECS`` old: a model call that
        follows at once checks its budget on it instead of reading it again (as fresh as a
        read would be), a later one reads."""
        if self.spend is None or time.monotonic() - self.spend[1] > FRESH_SECS:
            return None
        return self.spend[0]

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
        # A step without a model call leaves the spend as the last one's checkpoint returned it.
        spend = self.spend if done is None or done.spend is None else (done.spend, time.monotonic())
        agent = _known_after(outcome, done)
        seen = self.children_seen
        if not t.advances:
            held = self.step_seq if counter is None else counter
            return Cursor(
                state,
                held,
                self.attempt + 1,
                self.outputs,
                inbox,
                now,
                spend=spend,
                agent=agent,
                children_seen=seen,
            )
        if outcome.step.node_id is not None:
            self.outputs[outcome.step.node_id] = outcome.step.output
        seq = self.step_seq + 1 if counter is None else counter
        return Cursor(state, seq, 0, self.outputs, inbox, now, spend=spend, agent=agent, children_seen=seen)


def _known_after(outcome: StepOutcome, done: Checkpointed | None) -> AgentKnowledge | None:
    """What an agent step knew of its run, with the step itself and the tasks it created."""
    known = outcome.knowledge
    if known is None:
        return None
    written = outcome.step
    # Canonical, as a read gives it: the next decision shows the model what it would after a read.
    step = HistoryStep(
        written.seq, written.kind, written.name, json_codec.canonical(written.input),
        json_codec.canonical(written.output),
    )  # fmt: skip
    known = known.with_step(step, written.status)
    # Without ``done`` the step rides in the next checkpoint (a kept decision: it creates no tasks).
    return known if done is None else known.with_tasks(done.created_tasks or [])


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
    # What the step saw of the inbox: the checkpoint consumes the rows a completed step used
    # (exactly once, fenced), and compares the delivery count it saw.
    used = result.consumed if result.consumed is not None else () if result.passes_inbox else ran.inbox.ids
    return _outcome(
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
        inbox_seen=ran.inbox.seen,
        consumed=used if transition.step_status == "completed" else (),
    )


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
    inbox_seen: int = 0,
    consumed: tuple[int, ...] = (),
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
        inbox_seen=inbox_seen,
        consumed=consumed,
        children_seen=cursor.children_seen,
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
