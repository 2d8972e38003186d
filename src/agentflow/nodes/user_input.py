"""The ``user_input`` node's runner: ask a person, then read the answer (spec in
``agentflow.core.graph.human_nodes``).

The first run renders the request and parks the node; the answer, or the timeout, comes
back through the run's inbox (``agentflow.nodes.parked_requests``); the node consumes that
one delivery and fires the outcome's port.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import timedelta
from typing import Any

import orjson

from agentflow.core.errors import StepFailure
from agentflow.core.graph.action_nodes import rendered_url_problem
from agentflow.core.graph.human_nodes import TIMEOUT, UserInputNode
from agentflow.core.graph.message_nodes import EMAIL
from agentflow.core.link_tokens import ANSWER_PAGE, REPLY_HINT, holder, new_token, reply_token_for, token_hash
from agentflow.core.node_specs import NodeSpec
from agentflow.core.people import role_of
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.nodes.base import BaseRunner, NodeEnv
from agentflow.nodes.parked_requests import parked, wait_on
from agentflow.nodes.people_access import Assigned
from agentflow.nodes.request_slack import slack_message


class UserInputRunner(BaseRunner):
    """Ask, wait, and turn the answer into the node's output and port."""

    kind = "user_input"

    def describe(self, node: NodeSpec) -> str | None:
        """The interaction (``approval``, ``input``, ``selection``, ``review``)."""
        assert isinstance(node, UserInputNode)
        return node.interaction

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """Ask (first run), wait again (no answer yet), or fire the outcome's port."""
        assert isinstance(node, UserInputNode)
        where = parked(ctx, env)
        request_id, found, seconds = where.request_id, where.answer, node.wait.total_seconds()
        if found is None:
            pending = {"request_id": str(request_id), "status": "pending"}
            if where.woken:  # by something else: wait on
                return pending, wait_on(pending, seconds)
            request = await _request(node, env, request_id)
            assigned = await _assigned(node, ctx, env, request["assignees"])
            request["assignees"] = assigned.assignees
            notes = (
                emailed(request, assigned.mail, ctx, env.public_url, env.reply_to)
                if "email" in node.channels
                else ()
            )
            if node.webhook is not None:
                notes = (*notes, await _posted(node, request, ctx, env))
            if node.slack is not None:
                notes = (*notes, await slack_message(node, request, ctx, env))
            shown = {**pending, "message": request["message"], "assignees": request["assignees"]}
            if assigned.roles:
                shown["roles"] = assigned.roles
            if notes:
                shown["told"] = [f"{n['channel']} {n['recipient']}" for n in notes]
            return shown, wait_on(pending, seconds, request=request, notifications=notes)
        answer = found.payload
        outcome = str(answer.get("outcome"))
        response = answer.get("response")
        if outcome == TIMEOUT:
            if node.timeout_action == "fail":
                raise StepFailure(
                    "request_timed_out",
                    f"nobody answered user_input {node.id!r} within {node.wait}",
                    retryable=False,
                    details={"node": node.id, "request_id": str(request_id)},
                    solution="Answer sooner, give the node a longer 'wait', or set timeout_action "
                    "to continue or default_response.",
                )
            if node.timeout_action == "default_response":
                outcome, response = _default_outcome(node), node.default_response
        output = {
            "request_id": str(request_id),
            "outcome": outcome,
            "response": response,
            "reason": answer.get("reason"),
            "responded_by": answer.get("responded_by"),
            "responded_via": answer.get("responded_via"),
            "responded_at": answer.get("responded_at"),
        }
        return {"request_id": str(request_id)}, NodeResult(
            output=output, port=node.port_of(outcome), consumed=(found.id,)
        )


def _default_outcome(node: UserInputNode) -> str:
    """What a default response counts as: approved for decisions, answered otherwise."""
    return "approved" if node.interaction in ("approval", "review") else "answered"


async def _request(node: UserInputNode, env: NodeEnv, request_id: uuid.UUID) -> dict[str, Any]:
    """The request row's document (see ``agentflow.store.checkpoints.Effects.approval``)."""
    message = await env.render(node.message, node.id, "message")
    assignees = await env.render(node.assignees, node.id, "assignees")
    spec = node.request_spec() or {}
    if node.interaction == "review":
        spec = {**spec, "proposed": await env.render(node.proposed, node.id, "proposed")}
    shown = {"message": message if isinstance(message, str) else str(message), "spec": spec}
    digest = hashlib.sha256(orjson.dumps(shown, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return {
        "id": str(request_id),
        "kind": node.interaction,
        "node_id": node.id,
        "message": shown["message"],
        "spec": spec,
        "arguments": shown,
        "arguments_hash": digest,
        "assignees": [str(a) for a in assignees if str(a).strip()],
        "channels": list(node.channels),
        "timeout_action": node.timeout_action,
        "expires_in": node.wait.total_seconds(),
    }


async def _assigned(node: UserInputNode, ctx: StepContext, env: NodeEnv, named: list[str]) -> Assigned:
    """Whom the request is for: ``named`` with roles replaced by their people, where to mail each."""
    if env.people is not None:
        return await env.people.assign(ctx.workspace_id, named, node.id)
    if any(role_of(n) is not None for n in named):
        raise StepFailure(
            "role_has_no_people",
            f"user_input {node.id!r}: this worker cannot look up who holds a role",
            retryable=False,
            details={"node": node.id},
            solution="Run the workflow on an agentflow worker, or name people instead of roles.",
        )
    return Assigned(named, {n: n for n in named if EMAIL.fullmatch(n)})


def emailed(
    request: dict[str, Any],
    mail: dict[str, str],
    ctx: StepContext,
    base_url: str,
    reply_to: str | None = None,
) -> tuple[dict[str, Any], ...]:
    """An email to each assignee with an address (``mail``), with a link that answers the
    request as them (and, with ``reply_to``, a reply address whose replies the workflow's model
    reads); the tokens' hashes go into ``request['link_tokens']``. Written with the step (once)
    and delivered by the notifier (at least once, the note's id as Message-ID)."""
    notes: list[dict[str, Any]] = []
    tokens: dict[str, str] = {}
    for person, address in mail.items():
        token = new_token()
        tokens[token_hash(token)] = holder("email", person)
        link = f"{base_url}{ANSWER_PAGE}#request={request['id']}&token={token}"
        expires = timedelta(seconds=request["expires_in"])
        subject = f"{_SUBJECTS.get(request['kind'], 'Your answer is needed')}: {request['message'][:80]}"
        metadata = {"workflow_id": str(ctx.workflow_id), "request_id": request["id"]}
        body = f"{request['message']}\n\nAnswer here (the link works once, for {expires}):\n{link}\n"
        if reply_to:
            metadata["reply_to"], digest, held = reply_token_for(
                reply_to, uuid.UUID(request["id"]), person, address
            )
            tokens[digest] = held
            body += REPLY_HINT
        notes.append({
            "id": str(uuid.uuid5(ctx.run_id, f"request-email:{request['id']}:{person}")),
            "channel": "email",
            "recipient": address,
            "subject": subject,
            "body": body,
            "kind": "request",
            "metadata": metadata,
        })  # fmt: skip
    request["link_tokens"] = tokens
    return tuple(notes)


async def _posted(
    node: UserInputNode, request: dict[str, Any], ctx: StepContext, env: NodeEnv
) -> dict[str, Any]:
    """The webhook notification that POSTs the request to ``node.webhook``, with a token that
    answers it (``POST /api/public/requests/{id}/respond``); its hash joins ``link_tokens``."""
    assert node.webhook is not None
    url = str(await env.render(node.webhook, node.id, "webhook")).strip()
    problem = rendered_url_problem(url)
    if problem is not None:
        raise StepFailure(
            "request_webhook_invalid",
            f"user_input {node.id!r} field webhook: {problem}",
            retryable=False,
            details={"node": node.id, "field": "webhook"},
            solution="Make 'webhook' render to the http(s) URL that takes the request.",
        )
    token = new_token()
    request["link_tokens"] = {**request.get("link_tokens", {}), token_hash(token): holder("webhook", url)}
    data = {
        "request_id": request["id"],
        "run_id": str(ctx.run_id),
        "node": node.id,
        "kind": request["kind"],
        "message": request["message"],
        "spec": request["spec"],
        "assignees": request["assignees"],
        "expires_in_s": request["expires_in"],
        "respond_url": f"{env.public_url}/api/public/requests/{request['id']}/respond",
        "token": token,
    }
    return {
        "id": str(uuid.uuid5(ctx.run_id, f"request-webhook:{request['id']}")),
        "channel": "webhook",
        "recipient": url,
        "subject": f"Request: {request['message'][:80]}",
        "body": request["message"],
        "kind": "request",
        "metadata": {"data": data, "workflow_id": str(ctx.workflow_id), "request_id": request["id"]},
    }


_SUBJECTS = {"approval": "Approval needed", "review": "Review needed", "input": "Input needed"}
