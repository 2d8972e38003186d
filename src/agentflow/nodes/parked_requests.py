"""What every node that waits on a request shares (``user_input``, ``wait_callback``, ``wait``
with ``for_event``): the request's id, its answer in the inbox, parking until it comes, and the
document of a request that no person answers.

The first run of such a node makes the request; its checkpoint writes it and parks the node
(the run waits with no worker). The answer, or the timeout, arrives in the run's inbox as a
``request`` delivery; the node runs again and finds it by the request's id. Any other delivery
wakes it to no effect: it parks again, leaving the inbox to the nodes that wait for it.
"""

from __future__ import annotations

import uuid
from typing import Any

from agentflow.core.frozen import frozen
from agentflow.core.inbox import InboxItem
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.nodes.base import NodeEnv

REQUEST_KIND = "request"
"""The kind of the inbox delivery that carries an answer or a timeout."""
GRACE_SECONDS = 300.0
"""How long past its timeout a parked node looks again on its own (the scheduler's sweep
normally delivers the timeout first)."""


def request_id_for(run_id: uuid.UUID, asked: int) -> uuid.UUID:
    """The id of the request step ``asked`` of a run makes: the same on every attempt."""
    return uuid.uuid5(run_id, f"request:{asked}")


def answer_in(env: NodeEnv, request_id: str) -> InboxItem | None:
    """The inbox delivery that answers (or times out) request ``request_id``, if it came."""
    for item in env.inbox.items:
        payload = item.payload if isinstance(item.payload, dict) else {}
        if item.kind == REQUEST_KIND and payload.get("request_id") == request_id:
            return item
    return None


@frozen
class Parked:
    """Where a node that waits on a request is.

    Attributes:
        request_id: its request's id (made from the step that asked).
        answer: the delivery that answers or times it out, when it came.
        woken: the node runs again (it asked before) with no answer yet: it waits on.
    """

    request_id: uuid.UUID
    answer: InboxItem | None
    woken: bool


def parked(ctx: StepContext, env: NodeEnv) -> Parked:
    """Where the node running in ``ctx`` is with its request."""
    asked = ctx.step_seq if env.asked is None else env.asked
    request_id = request_id_for(ctx.run_id, asked)
    found = answer_in(env, str(request_id))
    return Parked(request_id, found, found is None and env.asked is not None)


def wait_on(output: Any, seconds: float, **effects: Any) -> NodeResult:
    """The result that parks the node for its answer: at most ``seconds`` (plus a grace), the
    inbox left to others; ``effects``: the request and notifications of the first run."""
    return NodeResult(output=output, park_secs=seconds + GRACE_SECONDS, passes_inbox=True, **effects)


def system_request(
    request_id: uuid.UUID,
    kind: str,
    node_id: str,
    message: str,
    spec: dict[str, Any],
    seconds: float,
    **more: Any,
) -> dict[str, Any]:
    """The document of a request an outside system or an event answers, not a person (see
    ``agentflow.store.checkpoints.Effects.approval``): no arguments, assignees or form."""
    return {
        "id": str(request_id),
        "kind": kind,
        "node_id": node_id,
        "message": message,
        "spec": spec,
        "arguments": {},
        "arguments_hash": str(request_id),
        "assignees": [],
        "channels": [kind],
        "timeout_action": "continue",
        "expires_in": seconds,
        **more,
    }
