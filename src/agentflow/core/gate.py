"""The event gate's question and answer: "should this event start this workflow?" (pure data).

The gatekeeper (``agentflow.runtime.gatekeeper``) asks an ``EventGate`` outside any
transaction; the model-backed gate is ``agentflow.agent.gate.ModelGate``.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, Protocol

from agentflow.core.frozen import frozen


@frozen
class GateQuestion:
    """What the gate is asked.

    Attributes:
        workflow: the workflow's name.
        prompt: its prompt (the trigger and objective, in the admin's words).
        instructions: the gate's own instructions, if any.
        event: the event document (topic, message_id, data, account_id, published_at).
        model: the model the workflow names (``provider:model``; None: the default).
    """

    workflow: str
    prompt: str
    instructions: str | None
    event: dict[str, Any]
    model: str | None = None


@frozen
class GateVerdict:
    """The gate's answer: start or not, and why (recorded with the decision).

    Attributes:
        start: True to start (or enroll) the workflow for this event.
        reason: why, in words a person can check.
        details: anything else worth recording (model, tokens, confidence).
    """

    start: bool
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


class EventGate(Protocol):
    """Decides whether an event should start a workflow."""

    async def decide(self, question: GateQuestion) -> GateVerdict:
        """Answer the question; raise to have it asked again later."""
        ...
