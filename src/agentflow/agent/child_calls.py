"""Calls that start a run of another workflow (a ``run_workflow`` node attached to the agent):
the agent waits for the child, holding no worker, and the child's end is the call's result.

The call's step records the start (``agent.child``) and its checkpoint inserts the child as
the item of that step, so the child's end wakes the agent (as a loop item wakes its graph run)
and canceling the agent cancels the child. On the wake the same pending call reads how the
child ended: its output is the call's result (shaped by the node's ``output_params``); a child
that failed or was canceled is an error result the model is told of and decides on. Woken
before the child ended (the backstop poll), the agent waits on. With ``wait: false`` the child
runs on its own and the call's result names it at once.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any

from agentflow.agent.calls import ToolOutcome, refusal
from agentflow.agent.env import AgentEnv
from agentflow.agent.outcome import AgentStep
from agentflow.core.agent_state import AgentState
from agentflow.core.chat import ToolCall
from agentflow.core.definitions import AgentConfig
from agentflow.core.graph.output_params import shape_output
from agentflow.core.records import RunRecord
from agentflow.core.statuses import RunStatus
from agentflow.core.step_results import Transition
from agentflow.store import agent_reads
from agentflow.store.checkpoints import NO_EFFECTS, Effects

AWAITING_CHILD = "awaiting_child"
CHILD_KIND = "agent.child"
POLL = timedelta(seconds=120)
"""How often a waiting agent looks at its child even when nothing woke it: a backstop, since
every way a child ends wakes a waiting parent (migration 0033)."""


def awaited(state: AgentState, call: ToolCall) -> bool:
    """Whether ``call`` started the child the run waits for."""
    return state.child is not None and state.child.get("call_id") == call.id


def wait_for(state: AgentState, call: ToolCall, outcome: ToolOutcome, step_input: Any, seq: int) -> AgentStep:
    """The step that starts ``outcome.child`` (inserted by its checkpoint as the step's only
    item) and waits for it."""
    child = outcome.child or {}
    waiting = replace(state, child={"call_id": call.id, "run_id": child["id"], "seq": seq})
    transition = Transition(
        RunStatus.WAITING, waiting.to_json(), "completed", wake_after=POLL, reason=AWAITING_CHILD
    )
    item = {**child, "item_index": 0, "released": True}
    return AgentStep(
        transition, CHILD_KIND, call.name, step_input, outcome.result, None, Effects(children=[item])
    )


def look_by(waiting: AgentStep, seconds: float) -> AgentStep:
    """``waiting`` (a step that waits for the child) looking again within ``seconds`` at the
    latest (when the agent's wall-time budget runs out), and at least every ``POLL``."""
    wake = min(POLL, timedelta(seconds=max(seconds, 0.0)))
    return replace(waiting, transition=replace(waiting.transition, wake_after=wake))


def detached(outcome: ToolOutcome) -> list[dict[str, Any]]:
    """The child a call starts without waiting for it (none when the call started none)."""
    if outcome.child is None or outcome.child_waits or outcome.refused:
        return []
    return [{**outcome.child, "released": True, "detached": True}]


async def ended(
    config: AgentConfig, run: RunRecord, state: AgentState, call: ToolCall, env: AgentEnv
) -> AgentStep | ToolOutcome:
    """What the awaited child ended with, as the call's outcome; or, while it runs, a step that
    waits on."""
    assert state.child is not None
    child_id = uuid.UUID(str(state.child["run_id"]))
    found = await agent_reads.child_end(env.pool, run.workspace_id, run.id, child_id)
    if found is None:
        transition = Transition(
            RunStatus.WAITING, state.to_json(), "completed", wake_after=POLL, reason=AWAITING_CHILD
        )
        output = {"run_id": str(child_id), "status": "running"}
        return AgentStep(transition, CHILD_KIND, call.name, step_input(call, state), output, None, NO_EFFECTS)
    if found["status"] == "completed":
        node = next((n for n in config.node_tools if n.id == call.name), None)
        result = found["output"]
        if node is not None and node.output_params:
            result = shape_output(node.id, node.output_params, result)
        return ToolOutcome(result=result)
    error = found["error"] if isinstance(found["error"], dict) else {}
    why = error.get("message") or found["status"]
    code = "child_canceled" if found["status"] == "canceled" else "child_failed"
    return refusal(code, f"the run of {call.name!r} ({child_id}) {found['status']}: {why}")


def step_input(call: ToolCall, state: AgentState) -> dict[str, Any]:
    """What the steps about an awaited child record as their input."""
    assert state.child is not None
    return {"call_id": call.id, "arguments": call.arguments, "run_id": state.child["run_id"]}
