"""The agent loop: one durable step at a time, deciding with the model or acting through a tool.

``decide``: check the budgets, build the context, ask the model with the enabled tools; its
tool calls become the run's pending calls. ``act``: execute the first pending call as its own
step (checked against the allow-list and its schema, approved first when it must be). The worker
checkpoints each step; a step that is cut off is done again from its start, and its writes to
the engine's tables happen only with its checkpoint.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from agentflow.agent import child_calls, mcp_tools, memory, toolbox
from agentflow.agent.approval_gate import approval_gate
from agentflow.agent.calls import CallContext, ToolOutcome, refusal
from agentflow.agent.decision import context_inputs, decision_request
from agentflow.agent.env import AgentEnv
from agentflow.agent.outcome import AgentStep
from agentflow.agent.stops import output_invalid, over_daily, stuck, suspend
from agentflow.core import planner
from agentflow.core.agent_context import DECIDE_KIND, TOOL_KIND
from agentflow.core.agent_knowledge import FRESH_SECS, AgentKnowledge
from agentflow.core.agent_state import (
    WALL_TIME_BREACH,
    AgentState,
    WorkspaceSpend,
    check_budget,
    needs_approval,
)
from agentflow.core.chat import ToolCall
from agentflow.core.definitions import AgentConfig
from agentflow.core.errors import ErrorInfo, StepFailure
from agentflow.core.inbox import AWAITING_EVENT, Inbox
from agentflow.core.records import RunRecord
from agentflow.core.statuses import RunStatus
from agentflow.core.step_results import Transition
from agentflow.llm import streaming
from agentflow.llm.base import ModelError
from agentflow.store import agent_reads
from agentflow.store.checkpoints import NO_EFFECTS, Effects
from agentflow.store.run_deltas import DeltaWriter

MAX_CALLS_PER_DECISION = 16
MAX_NUDGES = 1
MAX_REFUSED_IN_ROW = 5
_TEXT_OUTCOMES = {
    RunStatus.IN_PROGRESS: "nudged",
    RunStatus.COMPLETED: "completed",
    RunStatus.FAILED: "failed",
}
_rand = random.Random()


async def next_step(
    config: AgentConfig, run: RunRecord, state_doc: dict[str, Any], inbox: Inbox, attempt: int,
    seq: int, token: int, env: AgentEnv, now: datetime | None = None,
    known: AgentKnowledge | None = None, spend: WorkspaceSpend | None = None,
) -> AgentStep:  # fmt: skip
    """Execute the run's next agent step once (``now``: the database's time at the claim or
    the last checkpoint, for the wall-time budget; None: read it). ``known``: what the worker
    holding the run knows for a decision, ``spend``: the workspace's spend its last model
    call's checkpoint returned (None: read them); the step hands back what it knew."""
    started = time.monotonic()
    state = AgentState.from_json(state_doc)
    try:
        key = await memory.key_for(config, run, state_doc)
    except StepFailure as failure:
        return _failed(config, state, attempt, failure.info, failure.retryable, DECIDE_KIND, "memory", None)
    elapsed = _elapsed(run, now)
    if not state.decides_next:
        step = await _act(config, run, state, attempt, seq, token, env, elapsed)
    else:
        reads, known = await _decision_reads(run, env, known, spend)
        step = await _decide(config, run, state, inbox, (seq, attempt), env, reads, key, elapsed)
    if key is not None:
        step = memory.remember(config, run, state_doc, key, step)
    return AgentStep(**{**step.__dict__, "duration": time.monotonic() - started, "knowledge": known})


async def _decision_reads(
    run: RunRecord, env: AgentEnv, known: AgentKnowledge | None, spend: WorkspaceSpend | None
) -> tuple[agent_reads.DecisionReads, AgentKnowledge]:
    """What a decision is built from: as the worker knows it when it knows all of it, else
    read in one statement (without the history once the worker has it)."""
    now = time.monotonic()
    if (
        known is not None
        and known.tasks is not None
        and spend is not None
        and (run.account_id is None or known.account_fresh(now, FRESH_SECS))
    ):
        return agent_reads.DecisionReads(spend, known.account, list(known.history), list(known.tasks)), known
    reads = await agent_reads.decision_reads(
        env.pool, run.workspace_id, run.id, run.account_id, history=known is None
    )
    history = tuple(reads.history) if known is None else known.history
    knowledge = AgentKnowledge(history, tuple(reads.tasks), reads.account, now)
    return replace(reads, history=list(history)), knowledge


def knowledge_of(reads: agent_reads.DecisionReads) -> AgentKnowledge:
    """What a decision's reads (with the history) tell the worker, as of now: the next
    decision reads nothing while it stays fresh (``_decision_reads``)."""
    return AgentKnowledge(tuple(reads.history), tuple(reads.tasks), reads.account, time.monotonic())


async def _decide(
    config: AgentConfig, run: RunRecord, state: AgentState, inbox: Inbox, position: tuple[int, int],
    env: AgentEnv, reads: agent_reads.DecisionReads, key: str | None = None, elapsed: float | None = None,
) -> AgentStep:  # fmt: skip
    seq, attempt = position
    if elapsed is None:
        elapsed = await agent_reads.elapsed_seconds(env.pool, run.workspace_id, run.id)
    breach = check_budget(config.budget, state, elapsed, before="model") or over_daily(
        reads.spend, env.workspace_daily_usd, env.workspace_daily_tokens
    )
    if breach is not None:
        return suspend(state, breach)
    if state.refused >= MAX_REFUSED_IN_ROW:
        return stuck(state)
    try:  # the MCP servers' tools: asked once per version and worker, kept after that
        mcp_offer = await mcp_tools.offered(config, run, env)
    except StepFailure as failure:
        return _failed(config, state, attempt, failure.info, failure.retryable, DECIDE_KIND, "mcp", None)
    recalled = await memory.recall(config, run, key, env) if key is not None else None
    inputs = context_inputs(
        config,
        run,
        reads.account,
        steps=reads.history,
        tasks=reads.tasks,
        events=inbox.view(),
        plan=state.plan,
        now=datetime.now(UTC),
        more_tools=[schema.name for schema in mcp_offer],
        memory=None if recalled is None or recalled.recollection.empty else recalled.recollection.render(),
    )
    provider, model, request = decision_request(config, inputs, mcp_offer, env)
    messages = request.messages
    step_input = {
        "events": inputs.events,
        "messages": len(messages),
        "chars": sum(len(m.content) for m in messages),
    }
    if recalled is not None:
        step_input["memory"] = recalled.shown()
    sink = DeltaWriter(env.pool, run.workspace_id, run.id, seq, attempt) if config.stream else None
    try:
        response = await streaming.ask(provider, request, sink)
    except ModelError as exc:
        info = ErrorInfo(exc.code, exc.message, {"provider": provider.name, "model": model, **exc.details})
        return _failed(
            config, state, attempt, info, exc.retryable, DECIDE_KIND, f"{provider.name}:{model}", step_input
        )
    finally:
        if sink is not None:
            await sink.close()
    calls = tuple(
        ToolCall(c.id or f"call_{n}", c.name, c.arguments)
        for n, c in enumerate(response.message.tool_calls[:MAX_CALLS_PER_DECISION])
    )
    usage = env.usage_of(provider, model, response)
    usd = usage.usd_cost
    output = {
        "content": response.message.content,
        "tool_calls": [c.to_json() for c in calls],
        "finish_reason": response.finish_reason,
        "usage": {**response.usage.__dict__, "usd_cost": round(usd, 6)},
    }
    after = state.after_decision(calls, response.usage, usd)
    if calls:
        transition = Transition(RunStatus.IN_PROGRESS, after.to_json(), "completed")
    else:
        transition = _on_text(config, after, response.message.content.strip())
        output["on_text"] = _TEXT_OUTCOMES[transition.status]
        if transition.status is RunStatus.IN_PROGRESS:
            transition = replace(transition, state=after.after_nudge().to_json())
    return AgentStep(
        transition,
        DECIDE_KIND,
        usage.model,
        step_input,
        output,
        None,
        Effects(
            usage=memory.with_usage(usage, recalled.usage if recalled else None),
            memory_summary=recalled.summary if recalled else None,
        ),
        consumes_inbox=True,
    )


def _on_text(config: AgentConfig, state: AgentState, text: str) -> Transition:
    """How an answer with no tool call moves the run (``on_text``)."""
    if config.on_text == "complete":
        summary = text or "The model had nothing to do."
        return Transition(RunStatus.COMPLETED, state.to_json(), "completed", output=_result(state, summary))
    if config.on_text == "nudge" and state.nudges < MAX_NUDGES:
        return Transition(RunStatus.IN_PROGRESS, state.to_json(), "completed")
    told = " after being told to use its tools" if config.on_text == "nudge" else ""
    info = ErrorInfo(
        "agent_no_action",
        f"the model answered with text and no tool call{told}: {text[:300]!r}",
        {"text": text[:2000], "nudges": state.nudges},
        "Use a model that can call tools, say in the prompt which tools to use, "
        "or set on_text: complete to take such an answer as the run's summary.",
    )
    return Transition(RunStatus.FAILED, state.to_json(), "completed", reason="agent_no_action", error=info)


async def _act(
    config: AgentConfig, run: RunRecord, state: AgentState, attempt: int, seq: int, token: int, env: AgentEnv,
    elapsed: float | None = None,
) -> AgentStep:  # fmt: skip
    call = state.pending[0]
    if child_calls.awaited(state, call):  # woken while it waits for the run the call started
        try:
            ended = await child_calls.ended(config, run, state, call, env)
        except StepFailure as failure:  # the child's output does not fit the node's output_params
            ended = refusal(failure.info.code, failure.info.message)
        if isinstance(ended, AgentStep):  # the child runs on
            return await _wait_on(config, run, state, ended, env, elapsed)
        return _acted(state, call, ended, child_calls.step_input(call, state))
    if elapsed is None:
        elapsed = await agent_reads.elapsed_seconds(env.pool, run.workspace_id, run.id)
    breach = check_budget(config.budget, state, elapsed, before="tool")
    if breach is not None:
        return suspend(state, breach)
    # Only an account owner as a recipient reads the account: a notification, an approval notice.
    asks_owner = call.name == "send_notification" or (
        needs_approval(config, call.name) and "account_owner" in config.approval.notify
    )
    account = (
        await agent_reads.account(env.pool, run.workspace_id, run.account_id)
        if run.account_id and asks_owner
        else None
    )
    ctx = CallContext(run, config, call, seq, attempt, token, account, datetime.now(UTC), env)
    step_input: dict[str, Any] = {"call_id": call.id, "arguments": call.arguments}
    outcome = toolbox.check(ctx, call.arguments)
    arguments = call.arguments
    if outcome is None and needs_approval(config, call.name):
        gate = await approval_gate(ctx, state, env)
        if isinstance(gate, AgentStep):
            return gate
        if isinstance(gate, dict):  # the approver edited the call: that call runs, checked first
            arguments = gate
            step_input = {"call_id": call.id, "arguments": gate, "edited": True}
            outcome = toolbox.check(ctx, arguments)
        else:
            outcome = gate
    if outcome is not None and call.name == "complete" and config.output_schema is not None:
        if state.invalid_outputs >= config.output_retries:
            return output_invalid(state, call, outcome, step_input)
        state = replace(state, invalid_outputs=state.invalid_outputs + 1)
    if outcome is None:
        try:
            async with asyncio.timeout(config.timeout.total_seconds()):
                outcome = await toolbox.run_call(ctx, arguments)
        except TimeoutError:
            info = ErrorInfo("step_timeout", f"tool {call.name!r} did not finish within {config.timeout}")
            return _failed(config, state, attempt, info, True, TOOL_KIND, call.name, step_input, call)
        except StepFailure as failure:
            if failure.retryable:
                return _failed(
                    config, state, attempt, failure.info, True, TOOL_KIND, call.name, step_input, call
                )
            outcome = refusal(failure.info.code, failure.info.message)
        except Exception as exc:  # a tool's own bug or outage: retried per the workflow's policy
            info = ErrorInfo("tool_exception", f"{type(exc).__name__}: {exc}"[:2000])
            return _failed(config, state, attempt, info, True, TOOL_KIND, call.name, step_input, call)
    if outcome.child is not None and outcome.child_waits and not outcome.refused:
        waiting = child_calls.wait_for(state, call, outcome, step_input, seq)
        return child_calls.look_by(waiting, _wall_time_left(config, state, elapsed))
    return _acted(state, call, outcome, step_input)


def _acted(state: AgentState, call: ToolCall, outcome: ToolOutcome, step_input: Any) -> AgentStep:
    after = state.after_call(plan=outcome.plan, refused=outcome.refused)
    output: dict[str, Any] = {"call_id": call.id, "result": outcome.result}
    if outcome.refused:
        output["refused"] = True
    effects = (
        Effects(
            tasks=outcome.tasks,
            notifications=outcome.notifications,
            children=child_calls.detached(outcome),
            return_tasks=True,  # the worker keeps them for the run's next decision
        )
        if not outcome.refused
        else NO_EFFECTS
    )
    if outcome.complete is not None:
        if after.pending:
            output["skipped"] = [c.to_json() for c in after.pending]
        done = AgentState(**{**after.__dict__, "pending": (), "phase": "decide"})
        result = _result(done, outcome.complete, outcome.data)
        transition = Transition(RunStatus.COMPLETED, done.to_json(), "completed", output=result)
    elif outcome.wait_until is not None:
        reason = AWAITING_EVENT if outcome.wake_on_event else "timer"
        transition = Transition(
            RunStatus.WAITING, after.to_json(), "completed", wake_at=outcome.wait_until, reason=reason
        )
    else:
        transition = Transition(RunStatus.IN_PROGRESS, after.to_json(), "completed")
    return AgentStep(transition, TOOL_KIND, call.name, step_input, output, None, effects)


async def _wait_on(
    config: AgentConfig, run: RunRecord, state: AgentState, waiting: AgentStep, env: AgentEnv,
    elapsed: float | None,
) -> AgentStep:  # fmt: skip
    """Wait on for the child, unless the run's wall-time budget ran out meanwhile: then it is
    suspended (resumed with more time, it waits on); the next look comes when it would run out."""
    if elapsed is None:
        elapsed = await agent_reads.elapsed_seconds(env.pool, run.workspace_id, run.id)
    breach = check_budget(config.budget, state, elapsed, before="tool")
    if breach is not None and breach.code == WALL_TIME_BREACH:
        return suspend(state, breach)
    return child_calls.look_by(waiting, _wall_time_left(config, state, elapsed))


def _wall_time_left(config: AgentConfig, state: AgentState, elapsed: float) -> float:
    return config.budget.max_wall_time.total_seconds() + state.allowance.get("wall_seconds", 0) - elapsed


def _elapsed(run: RunRecord, now: datetime | None) -> float | None:
    """Seconds since the run started by the database's clock as of ``now`` (None: unknown)."""
    if now is None:
        return None
    return max((now - (run.started_at or run.created_at)).total_seconds(), 0.0)


def _failed(
    config: AgentConfig, state: AgentState, attempt: int, info: ErrorInfo, retryable: bool, kind: str,
    name: str, step_input: Any, call: ToolCall | None = None,
) -> AgentStep:  # fmt: skip
    transition = planner.on_failure(config.retry, state.to_json(), attempt, info, retryable, _rand.random)
    if transition.status == RunStatus.FAILED and call is not None:
        # A tool that keeps failing does not end the run: the model sees the error and decides.
        return _acted(state, call, refusal(info.code, info.message), step_input)
    return AgentStep(transition, kind, name, step_input, None, info, NO_EFFECTS)


def _result(state: AgentState, summary: str, data: Any = None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "summary": summary,
        "model_calls": state.model_calls,
        "tool_calls": state.tool_calls,
    }
    if state.plan is not None:
        result["plan"] = state.plan
    if data is not None:
        result["data"] = data
    return result
