"""The agent loop's memory: which key a run remembers under, what a decision loads (folding
older messages into a summary when due), and what each step adds.

The rules are in ``agentflow.core.agent_memory``; the rows are written by each step's
checkpoint (``Effects.memory``, ``Effects.memory_summary``), so a message is kept once, with
the step that made it, and a step that is cut off adds nothing.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import orjson

from agentflow.agent.env import AgentEnv
from agentflow.agent.outcome import AgentStep
from agentflow.core.agent_context import DECIDE_KIND, trigger_view
from agentflow.core.agent_memory import (
    SUMMARY_MAX_TOKENS,
    Memory,
    Recollection,
    checked_key,
    entry_documents,
    step_entries,
    summary_document,
    summary_messages,
)
from agentflow.core.agent_state import AgentState
from agentflow.core.chat import ModelRequest
from agentflow.core.definitions import AgentConfig
from agentflow.core.frozen import frozen
from agentflow.core.graph.agent_nodes import AGENT_MEMORY_KEY, AGENT_PROMPT
from agentflow.core.payload_format import with_nested_keys
from agentflow.core.records import RunRecord
from agentflow.core.templating import render
from agentflow.llm.base import ModelError
from agentflow.nodes.rendering import call_rendering
from agentflow.store import memory as memory_store
from agentflow.store.checkpoints import ModelUsage

logger = logging.getLogger(__name__)


@frozen
class Recalled:
    """What a decision loaded, and the summary it wrote (with that model call's usage)."""

    recollection: Recollection
    summary: dict[str, Any] | None = None
    usage: ModelUsage | None = None

    def shown(self) -> dict[str, Any]:
        """What the decision's step records about its memory."""
        found: dict[str, Any] = {"key": self.recollection.key, "loaded": len(self.recollection.entries)}
        if self.recollection.summary:
            found["summary"] = True
        if self.summary is not None:
            found["folded"] = len(self.recollection.older)
        return found


async def key_for(config: AgentConfig, run: RunRecord, state_doc: dict[str, Any]) -> str | None:
    """The key ``run`` remembers under: rendered by the agent node that started it, else from
    the run's own data (``payload``, ``account_id``, ``trigger``, ``run``); None without memory.

    Raises:
        StepFailure: ``memory_key_invalid``, or a template error naming ``memory.key``.
    """
    if config.memory is None:
        return None
    given = state_doc.get(AGENT_MEMORY_KEY)
    if isinstance(given, str):
        return given
    context = {
        "payload": with_nested_keys(run.input),
        "account_id": run.account_id,
        "trigger": run.trigger or {},
        "run": {"id": str(run.id), "workflow_id": str(run.workflow_id)},
    }
    return checked_key(await call_rendering(render, config.memory.key, context, field="memory.key"))


async def recall(config: AgentConfig, run: RunRecord, key: str, env: AgentEnv) -> Recalled:
    """What a decision loads for ``key``; when ``window`` older messages are waiting, they
    are folded into the summary first (a failed summary call is logged and tried next time)."""
    memory = config.memory
    assert memory is not None
    namespace = memory.namespace_for(config.name)
    found = await memory_store.recall(
        env.pool,
        run.workspace_id,
        namespace,
        key,
        run_id=run.id,
        window=memory.window,
        folding=memory.summarize,
    )
    if not memory.summarize or len(found.older) < memory.window:
        return Recalled(found)
    provider, model = env.model(config.model)
    request = ModelRequest(
        model, summary_messages(found.summary, found.older), max_output_tokens=SUMMARY_MAX_TOKENS
    )
    try:
        response = await provider.request(request)
    except ModelError as exc:
        logger.warning(
            "memory %s/%s: the summary call failed (%s); tried again later", namespace, key, exc.code
        )
        return Recalled(found)
    text = response.message.content.strip()
    if not text:
        return Recalled(found)
    usage = env.usage_of(provider, model, response)
    summary = summary_document(memory, namespace, key, text, found.older[-1].seq)
    folded = Recollection(key, summary["summary"], found.entries, found.older)
    return Recalled(folded, summary, usage)


def with_usage(usage: ModelUsage | None, extra: ModelUsage | None) -> ModelUsage | None:
    """A step's model usage with another call's added."""
    if extra is None or usage is None:
        return usage or extra
    return ModelUsage(
        usage.model,
        usage.input_tokens + extra.input_tokens,
        usage.output_tokens + extra.output_tokens,
        usage.cached_input_tokens + extra.cached_input_tokens,
        usage.usd_cost + extra.usd_cost,
        usage.calls + extra.calls,
    )


def remember(
    config: AgentConfig, run: RunRecord, state_doc: dict[str, Any], key: str, step: AgentStep
) -> AgentStep:
    """``step`` with the messages it adds to memory (none when it does not advance the run)."""
    memory: Memory | None = config.memory
    if memory is None or not step.transition.advances:
        return step
    first = step.kind == DECIDE_KIND and AgentState.from_json(state_doc).model_calls == 0
    opening = _opening(run, state_doc) if first else None
    entries = step_entries(memory, step.kind, step.name, step.output, opening)
    if not entries:
        return step
    docs = entry_documents(memory, memory.namespace_for(config.name), key, entries)
    return replace(step, effects=replace(step.effects, memory=docs))


def _opening(run: RunRecord, state_doc: dict[str, Any]) -> str:
    """What the run was asked: an agent node's rendered prompt, else what started it."""
    prompt = state_doc.get(AGENT_PROMPT)
    if isinstance(prompt, str):
        return prompt
    view = trigger_view(run.trigger, run.input)
    return orjson.dumps(view, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
