"""The ``send_message`` node: one notification through the outbox (spec in
``agentflow.core.graph.message_nodes``).

The step renders the message and returns it as a notification document (the fields of the
agent's ``send_notification`` tool: ``id``, ``channel``, ``recipient``, ``subject``, ``body``,
``kind``, ``account_id``, ``metadata``) in ``NodeResult.notifications``; the step's checkpoint
writes it to the ``notifications`` table exactly once, and the worker's notifier
(``agentflow.runtime.notifier``) delivers it afterwards, at least once, with the id as the
idempotency key (the email's Message-ID, the webhook's and Slack's ``Idempotency-Key``).

The id is derived from the step's idempotency key (``run_id:step_seq``), so every attempt of
the step names the same notification, and a checkpoint that is retried cannot add a second.

A Slack message's ``to`` is its incoming webhook URL, whose path is a secret: it is kept in the
notification's metadata (where the notifier reads it) and the step records its origin only.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

from agentflow.core.errors import StepFailure
from agentflow.core.graph.message_nodes import SendMessageNode, recipient_problem
from agentflow.core.node_specs import NodeSpec
from agentflow.core.step_context import StepContext
from agentflow.core.step_results import NodeResult
from agentflow.core.templating import has_templates
from agentflow.integrations.http_errors import origin_of
from agentflow.nodes.base import BaseRunner, NodeEnv

SUBJECT_CHARS = 120


def notification_id(ctx: StepContext) -> uuid.UUID:
    """The id of the notification a ``send_message`` step sends: the same on every attempt."""
    return uuid.uuid5(ctx.run_id, f"send_message:{ctx.idempotency_key}")


class SendMessageRunner(BaseRunner):
    """Render the message and hand it to the checkpoint as a notification for the outbox."""

    kind = "send_message"

    def describe(self, node: NodeSpec) -> str | None:
        """The channel, and the recipient when it is written out (``email ana@example.com``)."""
        assert isinstance(node, SendMessageNode)
        if has_templates(node.to):
            return node.channel
        return f"{node.channel} {_shown(node.channel, node.to)}"

    async def run(self, node: NodeSpec, ctx: StepContext, env: NodeEnv) -> tuple[Any, NodeResult]:
        """The notification is the checkpoint's to write; ``{notification_id, channel, recipient}``
        is the output and the rendered message (a Slack URL by its origin) the step's input."""
        assert isinstance(node, SendMessageNode)
        to = (await _text(node, env, "to", node.to)).strip()
        problem = recipient_problem(node.channel, to)
        if problem is not None:
            raise StepFailure(
                "message_recipient_invalid",
                f"send_message node {node.id!r}: {problem}",
                retryable=False,
                details={"node": node.id, "field": "to", "channel": node.channel},
                solution="Make 'to' render to an email address (email), an incoming webhook URL (slack),"
                " a user (in_app) or an http(s) URL (webhook).",
            )
        body = await _text(node, env, "body", node.body)
        if not body.strip():
            raise StepFailure(
                "message_body_empty",
                f"send_message node {node.id!r}: the body rendered to nothing",
                retryable=False,
                details={"node": node.id, "field": "body"},
                solution="Check the data 'body' reads, or give it a default (| default('...')).",
            )
        subject = await _text(node, env, "subject", node.subject) if node.subject is not None else ""
        if node.account_id is not None:
            account = await _text(node, env, "account_id", node.account_id)
        else:  # the run's own account: the message shows in that account's history
            account = str((env.template_context.get("run") or {}).get("account_id") or "")
        metadata: dict[str, Any] = {
            **(node.metadata or {}),
            "workflow_id": str(ctx.workflow_id),
            "node": node.id,
        }
        recipient = to
        if node.channel == "slack":
            metadata["slack_webhook_url"] = to
            recipient = _shown("slack", to)
        note_id = str(notification_id(ctx))
        doc = {
            "id": note_id,
            "channel": node.channel,
            "recipient": recipient,
            "subject": subject or body.strip().splitlines()[0][:SUBJECT_CHARS],
            "body": body,
            "kind": "message",
            "account_id": account or None,
            "metadata": metadata,
        }
        step_input = {k: doc[k] for k in ("channel", "recipient", "subject", "body", "account_id")}
        output = {"notification_id": note_id, "channel": node.channel, "recipient": recipient}
        return step_input, NodeResult(output=output, notifications=(doc,))


def _shown(channel: str, to: str) -> str:
    """What may be shown of a recipient: a Slack webhook URL by its origin only."""
    if channel != "slack":
        return to
    try:
        return origin_of(httpx.URL(to))
    except httpx.InvalidURL:
        return "slack"


async def _text(node: SendMessageNode, env: NodeEnv, field: str, template: str | None) -> str:
    """``template`` rendered as text (a number as written, a list or object as JSON, null as empty)."""
    value = await env.render(template, node.id, field)
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False, default=str)
