"""Tool calls a person approves first (an agent's ``approvals``): the request, the wait, and
what the decision does (``approval``: timeout, on_timeout, notify, allow_edits).

A request is named by the step that makes it and bound to the exact call (its arguments
hash); the run waits with no worker held. Approved, the call runs, or the call as the
approver edited it (checked against the tool's schema first); rejected or timed out, the
model is told and decides, or with ``on_timeout: fail`` the run fails.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import orjson

from agentflow.agent.calls import CallContext, ToolOutcome, refusal
from agentflow.agent.env import AgentEnv
from agentflow.agent.outcome import AgentStep
from agentflow.core.agent_state import AgentState, arguments_hash
from agentflow.core.chat import ToolCall
from agentflow.core.errors import ErrorInfo
from agentflow.core.link_tokens import ANSWER_PAGE, REPLY_HINT, holder, new_token, reply_token_for, token_hash
from agentflow.core.statuses import RunStatus
from agentflow.core.step_results import Transition
from agentflow.store import agent_reads
from agentflow.store.checkpoints import NO_EFFECTS, Effects

AWAITING_APPROVAL = "awaiting_approval"


async def approval_gate(
    ctx: CallContext, state: AgentState, env: AgentEnv
) -> AgentStep | ToolOutcome | dict[str, Any] | None:
    """Ask for approval (the run waits), or return what the decision says: None to go ahead
    as asked, the arguments the approver edited, a refusal, or the run failing."""
    call, policy = ctx.call, ctx.config.approval
    digest = arguments_hash(call.name, call.arguments)
    asked = state.approval
    pending = asked if asked and asked.get("call_id") == call.id and asked.get("hash") == digest else None
    # New requests are named by the step that makes them: call ids may repeat across decisions.
    approval_id = (
        uuid.UUID(pending["id"]) if pending else uuid.uuid5(ctx.run.id, f"approval:{ctx.seq}:{digest}")
    )
    step_input = {"call_id": call.id, "arguments": call.arguments}
    wait = policy.timeout.total_seconds()
    if pending is not None:
        found = await agent_reads.approval(env.pool, ctx.run.workspace_id, approval_id)
        if found is not None:
            if found["status"] == "approved" and found["arguments_hash"] == digest:
                edited = found.get("response")
                return edited if isinstance(edited, dict) and policy.allow_edits else None
            if found["status"] == "rejected":
                why = found["reason"] or "no reason given"
                return refusal(
                    "approval_rejected", f"{found['decided_by'] or 'a person'} rejected this call: {why}"
                )
            if found["status"] == "expired" or found["expired"]:
                if policy.on_timeout == "fail":
                    return _approval_expired(state, call, approval_id, policy.timeout, step_input)
                return refusal("approval_expired", "nobody approved this call in time")
            wait = max(float(found["expires_in"] or 0.0), 0.0)  # a wake before the deadline: wait on
    request = {
        "id": str(approval_id),
        "tool": call.name,
        "arguments": call.arguments,
        "arguments_hash": digest,
        "expires_in": policy.timeout.total_seconds(),
        "message": f"{ctx.config.name} wants to call {call.name}",
        "spec": {"allow_edits": policy.allow_edits},
    }
    waiting = AgentState(
        **{**state.__dict__, "approval": {"id": str(approval_id), "call_id": call.id, "hash": digest}}
    )
    output = {
        "approval_id": str(approval_id),
        "tool": call.name,
        "arguments_hash": digest,
        "status": "pending",
    }
    transition = Transition(
        RunStatus.WAITING, waiting.to_json(), "completed", wake_after=timedelta(seconds=wait),
        reason=AWAITING_APPROVAL,
    )  # fmt: skip
    effects = (
        Effects(approval=request, notifications=approval_notes(ctx, request, env.public_url, env.reply_to))
        if pending is None
        else NO_EFFECTS
    )
    return AgentStep(transition, "agent.approval", call.name, step_input, output, None, effects)


def _approval_expired(
    state: AgentState, call: ToolCall, approval_id: uuid.UUID, timeout: timedelta, step_input: Any
) -> AgentStep:
    """``on_timeout: fail``: nobody decided in time, so the run fails instead of going on."""
    info = ErrorInfo(
        "approval_expired",
        f"nobody approved the call to {call.name!r} within {timeout}",
        {"approval_id": str(approval_id), "tool": call.name},
        "Answer approvals sooner, raise approval.timeout, or set approval.on_timeout to reject "
        "(the model is told and decides).",
    )
    transition = Transition(
        RunStatus.FAILED, state.to_json(), "completed", reason="approval_expired", error=info
    )
    output = {"approval_id": str(approval_id), "tool": call.name, "status": "expired"}
    return AgentStep(transition, "agent.approval", call.name, step_input, output, None, NO_EFFECTS)


def approval_notes(
    ctx: CallContext, request: dict[str, Any], base_url: str, reply_to: str | None = None
) -> list[dict[str, Any]]:
    """Emails to the workflow's ``approval.notify`` about a new request, each with a link that
    answers it as that person, and with ``reply_to`` a reply address whose replies the model
    reads (the tokens' hashes go into ``request['link_tokens']``; the outbox sends them after
    the checkpoint; an unknown account owner is skipped)."""
    notes: list[dict[str, Any]] = []
    tokens: dict[str, str] = {}
    for n, who in enumerate(ctx.config.approval.notify):
        recipient = (ctx.account or {}).get("owner") if who == "account_owner" else who
        if not recipient:
            continue
        token = new_token()
        tokens[token_hash(token)] = holder("email", str(recipient))
        body = (
            f"{request['message']} with these arguments:\n\n"
            f"{orjson.dumps(request['arguments'], option=orjson.OPT_INDENT_2).decode()}\n\n"
            f"Approve or reject it here (the link works once, for "
            f"{timedelta(seconds=request['expires_in'])}):\n"
            f"{base_url}{ANSWER_PAGE}#request={request['id']}&token={token}\n"
        )
        metadata = {"workflow_id": str(ctx.run.workflow_id), "request_id": request["id"]}
        if reply_to:
            metadata["reply_to"], digest, held = reply_token_for(
                reply_to, uuid.UUID(request["id"]), str(recipient), str(recipient)
            )
            tokens[digest] = held
            body += REPLY_HINT
        notes.append({
            "id": str(uuid.uuid5(ctx.run.id, f"approval-note:{request['id']}:{n}")),
            "channel": "email",
            "recipient": str(recipient),
            "subject": f"Approval needed: {request['tool']} ({ctx.config.name})",
            "body": body,
            "kind": "approval",
            "account_id": ctx.run.account_id,
            "metadata": metadata,
        })  # fmt: skip
    request["link_tokens"] = tokens
    return notes
