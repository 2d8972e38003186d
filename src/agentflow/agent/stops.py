"""Agent steps that stop a run instead of going on: a budget reached suspends it (the run's
own, or the workspace's daily model spend), calls refused in a row or completions that keep
breaking the output schema fail it. Each says why and what to do next.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg

from agentflow.agent.calls import ToolOutcome
from agentflow.agent.outcome import AgentStep
from agentflow.core.agent_context import TOOL_KIND
from agentflow.core.agent_state import AgentState, Breach, WorkspaceSpend, check_workspace_budget
from agentflow.core.chat import ToolCall
from agentflow.core.errors import ErrorInfo
from agentflow.core.statuses import RunStatus
from agentflow.core.step_results import Transition
from agentflow.store import agent_reads
from agentflow.store.checkpoints import NO_EFFECTS


async def workspace_breach(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    default_usd: float,
    default_tokens: int,
    known: WorkspaceSpend | None = None,
) -> Breach | None:
    """Whether the workspace's model spend today has reached its own daily limit, else the
    default; ``known``: the spend and limits as just returned by a checkpoint (not read again)."""
    spend = known if known is not None else await agent_reads.workspace_spend(pool, workspace_id)
    return over_daily(spend, default_usd, default_tokens)


def over_daily(spend: WorkspaceSpend, default_usd: float, default_tokens: int) -> Breach | None:
    """The breach when ``spend`` reached the workspace's own daily limits, else the defaults."""
    used_usd, used_tokens, own_usd, own_tokens = spend
    limit_usd = own_usd if own_usd is not None else default_usd
    limit_tokens = own_tokens if own_tokens is not None else default_tokens
    return check_workspace_budget(used_usd, used_tokens, limit_usd, limit_tokens)


def stuck(state: AgentState) -> AgentStep:
    """The model's last calls were all refused: it is not getting anywhere, so the run fails
    rather than spend its budget repeating them."""
    info = ErrorInfo(
        "agent_stuck",
        f"the model's last {state.refused} tool calls in a row were refused (unknown tools, "
        "arguments that break the schema, failures or rejections); the run stopped instead of "
        "repeating them",
        {"refused_in_row": state.refused},
        "Look at the refused calls in the run's steps; fix the tools' schemas or the prompt, "
        "or use a model that follows tool schemas, then retry the run.",
    )
    transition = Transition(RunStatus.FAILED, state.to_json(), "completed", reason="agent_stuck", error=info)
    output = {"stopped": "agent_stuck", "refused_in_row": state.refused}
    return AgentStep(transition, "agent.stuck", "agent_stuck", None, output, None, NO_EFFECTS)


def suspend(state: AgentState, breach: Breach) -> AgentStep:
    """The run's budget (or the workspace's) is reached: the run is suspended until given more."""
    info = ErrorInfo(breach.code, breach.message, breach.details, breach.solution)
    transition = Transition(RunStatus.SUSPENDED, state.to_json(), "completed", reason=breach.code, error=info)
    output = {"suspended": breach.code, "message": breach.message, **breach.details}
    return AgentStep(transition, "agent.budget", breach.code, None, output, None, NO_EFFECTS)


def output_invalid(state: AgentState, call: ToolCall, outcome: ToolOutcome, step_input: Any) -> AgentStep:
    """The model kept completing with data that breaks the output schema: the run fails."""
    problem = outcome.result.get("error", {}).get("message", "") if isinstance(outcome.result, dict) else ""
    tries = state.invalid_outputs + 1
    info = ErrorInfo(
        "output_invalid",
        f"the agent completed {tries} time(s) with data that breaks output_schema: {problem}"[:2000],
        {"attempts": tries, "problems": problem[:2000]},
        "Describe the expected data in the prompt, simplify output_schema, raise output_retries, "
        "or use a model that follows JSON Schemas; then retry the run.",
    )
    done = state.after_call(refused=True)
    transition = Transition(
        RunStatus.FAILED, done.to_json(), "completed", reason="output_invalid", error=info
    )
    output = {"call_id": call.id, "result": outcome.result, "refused": True}
    return AgentStep(transition, TOOL_KIND, call.name, step_input, output, None, NO_EFFECTS)
