"""Ask a candidate (a version of an agent workflow, a model) to decide again where a recorded
run decided, with the context the run had then (``agentflow eval``).

The context of recorded decision ``k`` is rebuilt from the durable record: the run's trigger,
input and account, its completed steps before ``k`` (tool results included), the tasks it had
created by then (as they are stored now), the deliveries ``k`` consumed, and the plan its last
``generate_plan`` before ``k`` made. Nothing is executed: the candidate's tool calls are
compared with the recorded ones (``core.evals``), never run. Not replayed: agent memory and
MCP tools (the candidate sees neither).
"""

from __future__ import annotations

from typing import Any

from agentflow.agent.decision import context_inputs, decision_request
from agentflow.agent.env import AgentEnv
from agentflow.core.agent_context import TOOL_KIND, HistoryStep
from agentflow.core.definitions import AgentConfig
from agentflow.core.evals import Comparison, calls_of, usd_of
from agentflow.core.records import RunRecord
from agentflow.llm.base import ModelError
from agentflow.store import agent_reads, replays


async def replay_run(config: AgentConfig, run: RunRecord, env: AgentEnv) -> list[Comparison]:
    """Each recorded decision of ``run`` and what ``config`` (with ``env``'s models) decides there."""
    pool, workspace = env.pool, run.workspace_id
    history = await agent_reads.history(pool, workspace, run.id)
    account = await agent_reads.account(pool, workspace, run.account_id) if run.account_id else None
    recorded = await replays.decisions(pool, workspace, run.id)
    found: list[Comparison] = []
    for n, decision in enumerate(recorded):
        before = [s for s in history if s.seq < decision.seq]
        inputs = context_inputs(
            config,
            run,
            account,
            steps=before,
            tasks=await replays.tasks_before(pool, workspace, run.id, decision.started_at),
            events=await replays.events_seen(pool, workspace, run.id, decision.seq),
            plan=plan_before(before),
            now=decision.started_at,
        )
        provider, model, request = decision_request(config, inputs, (), env)
        calls: tuple[tuple[str, Any], ...] = ()
        usd, error = 0.0, None
        try:
            response = await provider.request(request)
        except ModelError as exc:
            error = f"{exc.code}: {exc}"
        else:
            calls = tuple((c.name, c.arguments) for c in response.message.tool_calls)
            usd = float(env.usage_of(provider, model, response).usd_cost)
        found.append(
            Comparison(
                str(run.id),
                decision.seq,
                calls_of(decision.output),
                calls,
                usd_of(decision.output),
                usd,
                final=n == len(recorded) - 1,
                error=error,
            )
        )
    return found


def plan_before(steps: list[HistoryStep]) -> dict[str, Any] | None:
    """The plan the run's last ``generate_plan`` among ``steps`` made (None: none yet)."""
    for step in reversed(steps):
        if step.kind == TOOL_KIND and step.name == "generate_plan" and isinstance(step.output, dict):
            result = step.output.get("result")
            plan = result.get("plan") if isinstance(result, dict) else None
            if isinstance(plan, dict):
                return plan
    return None
