"""Message nodes: steps that tell a person or a system something (issue 13).

- ``send_message``: one notification by email, Slack, in-app or webhook (seed 002). The step's
  checkpoint writes it to the notification outbox, exactly once, and the notifier delivers it
  afterwards, at least once, with the notification's id as its idempotency key: the same path
  as an agent's ``send_notification`` tool.

What is checked here, at publish: the channel, that the body is not empty, and a recipient
written without templates: an email address for ``email``, an http(s) URL with a host for
``slack`` (its incoming webhook) and ``webhook``. A recipient with templates is checked when
the step runs (``message_recipient_invalid``).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import Field, JsonValue, model_validator

from agentflow.core.graph.action_nodes import rendered_url_problem
from agentflow.core.node_specs import AgentToolFields, NodeSpec, register_node_spec
from agentflow.core.templating import has_templates

MAX_RECIPIENT = 2_000
MAX_SUBJECT = 1_000
MAX_BODY = 100_000
MAX_METADATA = 50
CHANNELS = ("email", "slack", "in_app", "webhook")
EMAIL = re.compile(r"^[^@\s<>\"',;]{1,64}@[A-Za-z0-9.-]{1,253}\.[A-Za-z]{2,63}$")
"""The address an email notification may go to (as the ``send_notification`` tool checks)."""


def recipient_problem(channel: str, recipient: str) -> str | None:
    """What is wrong with ``recipient`` (rendered) for ``channel``, else None."""
    if not recipient.strip():
        return "the recipient is empty"
    if channel == "email" and not EMAIL.fullmatch(recipient.strip()):
        return f"{recipient!r} is not an email address (e.g. ana@example.com)"
    if channel in ("slack", "webhook"):
        problem = rendered_url_problem(recipient.strip())
        if problem is not None:
            what = "a Slack incoming webhook URL" if channel == "slack" else "a webhook URL"
            return f"'to' must be {what}: {problem}"
    return None


class SendMessageNode(AgentToolFields, NodeSpec):
    """Send one message by email, Slack, in-app notification or webhook. The step's checkpoint
    writes it to the notification outbox exactly once; the notifier delivers it afterwards,
    retrying until it is through, with the notification's id (the same on every attempt of the
    step) as its idempotency key. ``to`` is an email address, a Slack incoming webhook URL, a
    user for in-app messages, or the URL a webhook is POSTed to; ``to``, ``subject``, ``body``
    and ``account_id`` are templates. The output is ``{notification_id, channel, recipient}``."""

    title: ClassVar[str] = "Send message"
    literal_fields: ClassVar[frozenset[str]] = frozenset({"channel", "metadata"})
    result_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "notification_id": {"type": "string", "format": "uuid"},
            "channel": {"type": "string", "enum": list(CHANNELS)},
            "recipient": {"type": "string"},
        },
        "required": ["notification_id", "channel", "recipient"],
        "additionalProperties": False,
    }
    type: Literal["send_message"] = "send_message"
    channel: Literal["email", "slack", "in_app", "webhook"] = Field(
        description="How to send it: email, slack, in_app or webhook."
    )
    to: str = Field(
        min_length=1,
        max_length=MAX_RECIPIENT,
        description="The recipient (a template): an email address, a Slack incoming webhook URL,"
        " an in-app user, or a webhook URL.",
    )
    subject: str | None = Field(default=None, max_length=MAX_SUBJECT, description="The subject (a template).")
    body: str = Field(min_length=1, max_length=MAX_BODY, description="The message (a template).")
    account_id: str | None = Field(
        default=None,
        max_length=200,
        description="The account the message is about (a template); default: the run's account.",
    )
    metadata: dict[str, JsonValue] | None = Field(
        default=None,
        max_length=MAX_METADATA,
        description="Extra data stored with the notification (not a template).",
    )

    @model_validator(mode="after")
    def _recipient(self) -> SendMessageNode:
        if not has_templates(self.to):
            problem = recipient_problem(self.channel, self.to)
            if problem is not None:
                raise ValueError(f"'to': {problem}")
        return self


register_node_spec(SendMessageNode)
