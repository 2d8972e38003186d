"""The ``wait`` node: sleep durably (the run leaves the worker until it is due).

A wait never uses the run's inbox: it hands what arrived on to the next node. With
``wake_on_event`` the sleep also ends when something arrives; if something has already
arrived and not been seen by a step, the wait ends at once. With ``for_event`` it waits for a
matching event instead: its step writes a request of kind ``event`` that the dispatcher
answers, and only that answer (or the timeout) is taken from the inbox.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agentflow.core.conditions import check_conditions
from agentflow.core.errors import StepFailure
from agentflow.core.node_specs import NodeSpec, WaitNode
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.nodes.base import BaseRunner, NodeEnv
from agentflow.nodes.parked_requests import parked, system_request, wait_on

TIMEOUT = "timeout"


class WaitRunner(BaseRunner):
    """Turn the node into a wake time; the checkpoint stores it in database time."""

    kind = "wait"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """Return the duration or the rendered ``until`` time."""
        assert isinstance(node, WaitNode)
        if node.for_event is not None:
            return await wait_for_event(node, ctx, env)
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
        when = await wake_time(node, env)
        shown: dict[str, Any] = {"until": when.isoformat()}
        if node.wake_on_event:
            shown["wake_on_event"] = True
        return shown, NodeResult(shown, wake_at=when, wake_on_event=node.wake_on_event, passes_inbox=True)


async def wake_time(node: WaitNode, env: NodeEnv) -> datetime:
    """The node's ``until``, rendered and checked.

    Raises:
        StepFailure: ``invalid_wait_until`` (not a timestamp, or no time zone).
    """
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
    return when


async def wait_for_event(node: WaitNode, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
    """Start waiting for the event (first run), wait on (woken by something else), or go on
    with the event, or null when the time ran out (see ``agentflow.core.graph.event_waits``)."""
    assert node.for_event is not None
    where = parked(ctx, env)
    request_id, found = where.request_id, where.answer
    if found is not None:
        event = None if found.payload.get("outcome") == TIMEOUT else found.payload.get("response")
        return {"request_id": str(request_id)}, NodeResult(output=event, consumed=(found.id,))
    if node.duration is not None:
        seconds = node.duration.total_seconds()
    else:
        seconds = max((await wake_time(node, env) - datetime.now(UTC)).total_seconds(), 0.001)
    pending = {"request_id": str(request_id), "topic": node.for_event.topic, "status": "waiting"}
    if where.woken:
        return pending, wait_on(pending, seconds)
    match = await env.render(node.for_event.match, node.id, "for_event.match")
    _condition, problems = check_conditions(match, "for_event.match") if match is not None else (None, [])
    if problems:
        raise StepFailure(
            "wait_match_invalid",
            f"wait {node.id!r}: for_event.match rendered to a condition that does not parse: "
            f"{problems[0]['path']}: {problems[0]['message']}",
            retryable=False,
            details={"node": node.id, "errors": problems},
            solution="Make the templates in 'match' render values its operators take.",
        )
    topic = node.for_event.topic
    spec = {"topic": topic, "match": match}
    request = system_request(
        request_id, "event", node.id, f"waiting for an event of {topic!r}", spec, seconds
    )
    shown = {**pending, "match": match, "timeout_s": seconds}
    return shown, wait_on(pending, seconds, request=request)
