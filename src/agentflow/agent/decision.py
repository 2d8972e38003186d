"""What one agent decision is asked from: the context's inputs and the model request.

Shared by the agent loop (a live decision) and replays (a recorded decision asked again of
another config, ``agent/replay.py``), so both show the model the same things.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from agentflow.agent import toolbox
from agentflow.agent.env import AgentEnv
from agentflow.core.agent_context import ContextInputs, HistoryStep, build_messages
from agentflow.core.agent_state import allowed_tools
from agentflow.core.chat import ModelRequest, ToolSchema
from agentflow.core.definitions import AgentConfig
from agentflow.core.records import RunRecord
from agentflow.llm.base import ModelProvider

DEFAULT_MAX_TOKENS = 2048


def context_inputs(
    config: AgentConfig,
    run: RunRecord,
    account: dict[str, Any] | None,
    *,
    steps: list[HistoryStep],
    tasks: list[dict[str, Any]],
    events: list[dict[str, Any]],
    plan: dict[str, Any] | None,
    now: datetime,
    more_tools: Sequence[str] = (),
    memory: str | None = None,
) -> ContextInputs:
    """What a decision of ``run`` is built from: its config and record, and what was read for
    that moment (its steps, tasks, events and plan; ``more_tools``: the MCP servers')."""
    return ContextInputs(
        workflow=config.name,
        prompt=config.prompt,
        account=account,
        trigger=run.trigger,
        payload=run.input,
        steps=steps,
        tasks=tasks,
        events=events,
        plan=plan,
        tools=[*allowed_tools(config), *more_tools],
        now=now,
        limits=config.context,
        memory=memory,
    )


def decision_request(
    config: AgentConfig, inputs: ContextInputs, mcp_offer: Sequence[ToolSchema], env: AgentEnv
) -> tuple[ModelProvider, str, ModelRequest]:
    """The model call of a decision made from ``inputs``: the provider, the model, the request."""
    provider, model = env.model(config.model)
    request = ModelRequest(
        model,
        build_messages(inputs),
        (*toolbox.tool_schemas(config, env.tools), *mcp_offer),
        max_output_tokens=config.max_tokens or DEFAULT_MAX_TOKENS,
        temperature=config.temperature,
        top_p=config.top_p,
    )
    return provider, model, request
