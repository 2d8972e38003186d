"""Execute one step of an agent run and describe its checkpoint (as ``step`` does for nodes)."""

from __future__ import annotations

import time
from dataclasses import replace

from agentflow.agent.env import AgentEnv
from agentflow.agent.loop import knowledge_of, next_step
from agentflow.core.agent_state import AgentState
from agentflow.core.definitions import AgentConfig
from agentflow.core.inbox import AWAITING_EVENT
from agentflow.core.records import RunRecord
from agentflow.core.statuses import RunStatus
from agentflow.runtime import tracing
from agentflow.runtime.step import Cursor, StepOutcome
from agentflow.store import agent_reads, json_codec, runs
from agentflow.store.checkpoints import RunWrite, StepWrite
from agentflow.store.commit_groups import RowFetcher


async def begin(commits: RowFetcher, run: RunRecord, token: int, owner: str, cursor: Cursor) -> Cursor | None:
    """Begin the claimed run's step (``runs.begin``); before a decision, read what it reads in
    the same statement, so that the decision reads nothing more (the cursor carries it). None
    when the lease was lost."""
    if not AgentState.from_json(cursor.state).decides_next:
        return cursor if await runs.begin(commits, run.workspace_id, run.id, token, owner) else None
    reads = await agent_reads.begin_reading(commits, run.workspace_id, run.id, token, owner, run.account_id)
    if reads is None:
        return None
    return replace(cursor, agent=knowledge_of(reads), spend=(reads.spend, time.monotonic()))


async def execute(
    config: AgentConfig, run: RunRecord, cursor: Cursor, env: AgentEnv, token: int
) -> StepOutcome:
    """Run the agent's next step once and say how to checkpoint it."""
    attempt = cursor.attempt + 1
    with tracing.step_span(run, cursor.step_seq, attempt, "agent", None) as span:
        step = await next_step(
            config, run, cursor.state, cursor.inbox, attempt, cursor.step_seq, token, env, cursor.now,
            cursor.agent, cursor.fresh_spend(),
        )  # fmt: skip
        call_id = step.input.get("call_id") if isinstance(step.input, dict) else None
        tracing.name_step(
            span, step.kind, step.name, step.error.code if step.error else None, call_id=call_id
        )
    t = step.transition
    kept = {k: v for k, v in cursor.state.items() if k != "agent"}
    if kept:  # an agent node's child run: its state also names the node and the prompt
        t = replace(t, state={**kept, **t.state})
    output = step.output if t.advances else None
    try:
        json_codec.encode(output)
    except json_codec.UnstorableJson as exc:  # a tool returned what jsonb cannot store
        problem = {
            "code": "output_not_storable",
            "message": f"the tool returned what cannot be stored: {exc}",
        }
        output = {"call_id": (step.input or {}).get("call_id"), "result": {"error": problem}}
    run_write = RunWrite(
        status=t.status.value,
        status_reason=t.reason,
        state=t.state,
        output=t.output if t.status.is_terminal else None,
        error=t.error.to_json() if t.error else None,
        advance=t.advances,
        wake_after=t.wake_after.total_seconds() if t.wake_after else None,
        wake_at=t.wake_at,
    )
    step_write = StepWrite(
        seq=cursor.step_seq,
        attempt=attempt,
        node_id=None,
        kind=step.kind,
        name=step.name,
        status=t.step_status,
        input=step.input,
        output=output,
        error=step.error.to_json() if step.error else None,
        duration=step.duration,
    )
    consumed = cursor.inbox.ids if (step.consumes_inbox and t.advances) else ()
    seen = cursor.inbox.seen
    if t.status == RunStatus.WAITING and t.reason == AWAITING_EVENT and cursor.inbox.items and not consumed:
        seen = -1  # events arrived after the last decision: the wait ends at once so one sees them
    run_write = replace(run_write, inbox_seen=seen, consumed=consumed)
    return StepOutcome(t, run_write, step_write, step.effects, step.knowledge)
