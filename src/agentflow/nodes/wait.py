"""The ``wait`` node: sleep durably (the run leaves the worker until it is due).

A wait never uses the run's inbox: it hands what arrived on to the next node. With
``wake_on_event`` the sleep also ends when something arrives; if something has already
arrived and not been seen by a step, the wait ends at once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentflow.core.errors import StepFailure
from agentflow.core.node_specs import NodeSpec, WaitNode
from agentflow.core.planner import NodeResult
from agentflow.core.step_context import StepContext
from agentflow.nodes.base import BaseRunner, NodeEnv


class WaitRunner(BaseRunner):
    """Turn the node into a wake time; the checkpoint stores it in database time."""

    kind = "wait"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """Return the duration or the rendered ``until`` time."""
        assert isinstance(node, WaitNode)
        pending = env.template_context.get("inbox") or []
        if node.wake_on_event and pending:
            # Deliveries no step has seen yet: sleeping now would wait for the one after them.
            return {"wake_on_event": True}, NodeResult(
                {"woken_by": "inbox", "pending": len(pending)}, passes_inbox=True
            )
        if node.duration is not None:
            seconds = node.duration.total_seconds()
            if node.wake_on_event:
                output = {"at_most": seconds, "wake_on_event": True}
                result = NodeResult(output, wake_after=node.duration, wake_on_event=True, passes_inbox=True)
                return {"duration": seconds, "wake_on_event": True}, result
            return {"duration": seconds}, NodeResult(
                {"slept": seconds}, wake_after=node.duration, passes_inbox=True
            )
        until = await env.render(node.until, node.id, "until")
        try:
            when = until if isinstance(until, datetime) else datetime.fromisoformat(str(until))
        except ValueError:
            raise StepFailure(
                "invalid_wait_until",
                f"wait 'until' rendered to {until!r}, which is not an ISO 8601 timestamp",
                retryable=False,
                solution="Make 'until' render to a timestamp such as 2026-01-31T09:00:00Z.",
            ) from None
        if when.tzinfo is None:
            raise StepFailure(
                "invalid_wait_until",
                f"wait 'until' {until!r} has no time zone",
                retryable=False,
                solution="Add a UTC offset, for example 'Z' or '+02:00'.",
            )
        shown: dict[str, Any] = {"until": when.isoformat()}
        if node.wake_on_event:
            shown["wake_on_event"] = True
        return shown, NodeResult(shown, wake_at=when, wake_on_event=node.wake_on_event, passes_inbox=True)
