"""The ``wait_callback`` node's runner: make the callback, then read the call (spec in
``agentflow.core.graph.callback_nodes``).

The first run makes a request of kind ``callback`` with a fresh secret token; the row keeps
only the token's SHA-256 (``link_tokens``), and the URL (with the token) is the step's output and, with
``notify``, a webhook notification. Both are written by the step's checkpoint, so only the
attempt that checkpoints hands out a URL that works. The call (or the timeout) arrives in the
run's inbox as a ``request`` delivery, as a person's answer does; the node runs again and
fires ``result`` with the call's body.
"""

from __future__ import annotations

import uuid
from typing import Any

from agentflow.core.errors import StepFailure
from agentflow.core.graph.action_nodes import rendered_url_problem
from agentflow.core.graph.callback_nodes import TIMEOUT, WaitCallbackNode
from agentflow.core.link_tokens import holder, new_token, token_hash
from agentflow.core.node_specs import NodeSpec
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.nodes.base import BaseRunner, NodeEnv
from agentflow.nodes.parked_requests import parked, system_request, wait_on

CALLBACK_PATH = "/api/public/callbacks/"


class WaitCallbackRunner(BaseRunner):
    """Make the callback, wait, and turn the call into the node's output."""

    kind = "wait_callback"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """Make the callback (first run), wait again (no call yet), or fire with the body."""
        assert isinstance(node, WaitCallbackNode)
        where = parked(ctx, env)
        request_id, found, seconds = where.request_id, where.answer, node.wait.total_seconds()
        if found is None:
            pending = {"request_id": str(request_id), "status": "waiting"}
            if where.woken:  # by something else: wait on
                return pending, wait_on(pending, seconds)
            token = new_token()
            url = f"{env.public_url}{CALLBACK_PATH}{request_id}?token={token}"
            message = f"waiting for a call to the callback URL of {node.id!r}"
            tokens = {token_hash(token): holder("callback", node.id)}
            request = system_request(
                request_id, "callback", node.id, message, {}, seconds,
                timeout_action=node.timeout_action, link_tokens=tokens,
            )  # fmt: skip
            notes = await _notify(node, ctx, env, request_id, url) if node.notify is not None else ()
            waiting = {**pending, "callback_url": url, "expires_in_s": seconds}
            return waiting, wait_on(waiting, seconds, request=request, notifications=notes)
        shown, taken = {"request_id": str(request_id)}, (found.id,)
        if found.payload.get("outcome") != TIMEOUT:
            return shown, NodeResult(output=found.payload.get("response"), consumed=taken)
        if node.timeout_action == "fail":
            raise StepFailure(
                "callback_timed_out",
                f"nothing called wait_callback {node.id!r} back within {node.wait}",
                retryable=False,
                details={"node": node.id, "request_id": str(request_id)},
                solution="Call back sooner, give the node a longer 'wait', or set timeout_action "
                "to continue or default_response.",
            )
        if node.timeout_action == "continue":
            return shown, NodeResult(output=None, port=TIMEOUT, consumed=taken)
        return shown, NodeResult(output=node.default_response, consumed=taken)


async def _notify(
    node: WaitCallbackNode, ctx: StepContext, env: NodeEnv, request_id: uuid.UUID, url: str
) -> tuple[dict[str, Any], ...]:
    """The webhook notification that tells ``notify`` the callback URL (written once, with
    the step; delivered at least once with its id as idempotency key)."""
    assert node.notify is not None
    rendered = await env.render(node.notify, node.id, "notify")
    target = str(rendered).strip()
    problem = rendered_url_problem(target)
    if problem is not None:
        raise StepFailure(
            "callback_notify_invalid",
            f"wait_callback {node.id!r} field notify: {problem}",
            retryable=False,
            details={"node": node.id, "field": "notify"},
            solution="Make 'notify' render to the http(s) URL to tell the callback URL.",
        )
    data = None if node.data is None else await env.render(node.data, node.id, "data")
    announced = {
        "callback_url": url,
        "request_id": str(request_id),
        "run_id": str(ctx.run_id),
        "node": node.id,
        "expires_in_s": node.wait.total_seconds(),
        "data": data,
    }
    note = {
        "id": str(uuid.uuid5(ctx.run_id, f"wait_callback:{ctx.idempotency_key}")),
        "channel": "webhook",
        "recipient": target,
        "subject": f"callback for {node.id}",
        "body": url,
        "kind": "callback",
        "metadata": {"data": announced, "workflow_id": str(ctx.workflow_id), "node": node.id},
    }
    return (note,)
