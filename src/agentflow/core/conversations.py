"""The conversation a run answers (issue 15, seed 002's run list): ``{id, channel, title}``,
given when a run is started (``check_conversation``), or named by an event: a trigger may say
how an event names its conversation (``trigger.conversation``: templates over ``event``, as
the enrollment key is), so runs started by events and webhooks are found by
``conversation_id`` and ``channel`` as runs started through the API are.

Example (a support workflow started by ticket events)::

    trigger:
      topics: [ticket.replied]
      conversation:
        id: "{{ event.data.ticket_id }}"
        channel: email
        title: "{{ event.data.subject }}"
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentflow.core.errors import ConfigError, StepFailure
from agentflow.core.templating import render

CHANNEL = re.compile(r"[a-z0-9][a-z0-9_.-]{0,49}")
"""A conversation's channel: ``slack``, ``email``, ``web``, ``zendesk``, ``whatsapp`` ..."""
_CONVERSATION_FIELDS = {"id": 200, "channel": 50, "title": 300}


def check_conversation(conversation: Any) -> dict[str, str] | None:
    """The conversation a run answers, checked: ``{id, channel}`` and an optional ``title``.

    Raises:
        ConfigError: ``conversation_invalid`` naming the field.
    """
    if conversation is None:
        return None
    if not isinstance(conversation, dict):
        raise _conversation_invalid("conversation", "an object {id, channel, title}")
    unknown = sorted(set(conversation) - set(_CONVERSATION_FIELDS))
    if unknown:
        raise _conversation_invalid(
            f"conversation.{unknown[0]}", "absent: a conversation has id, channel, title"
        )
    checked: dict[str, str] = {}
    for name, longest in _CONVERSATION_FIELDS.items():
        value = conversation.get(name)
        if value is None and name == "title":
            continue
        if not isinstance(value, str) or not 1 <= len(value) <= longest or not value.isprintable():
            raise _conversation_invalid(f"conversation.{name}", f"1 to {longest} printable characters")
        checked[name] = value
    if not CHANNEL.fullmatch(checked["channel"]):
        raise _conversation_invalid("conversation.channel", "lower case letters, digits, _ . - (e.g. slack)")
    return checked


def _conversation_invalid(field: str, expected: str) -> ConfigError:
    return ConfigError(
        "conversation_invalid",
        f"{field} must be {expected}",
        details={"field": field},
        solution='Send conversation as {"id": "...", "channel": "slack", "title": "..."}.',
    )


class ConversationTemplate(BaseModel):
    """How an event names the conversation its run answers.

    Attributes:
        id: a template (``{{ event.data.ticket_id }}``); when it renders empty, the run has no
            conversation.
        channel: the channel (``email``, ``slack``, ``api``...), a template or a literal.
        title: optional, a template or a literal.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=500)
    channel: str = Field(min_length=1, max_length=500)
    title: str | None = Field(default=None, min_length=1, max_length=1000)


def conversation_of(template: ConversationTemplate, event: dict[str, Any]) -> dict[str, str] | None:
    """The conversation ``event`` (its document) names, checked; None when its id renders empty.

    Raises:
        StepFailure: ``template_error``/``template_limit`` when a template does not render,
            ``conversation_invalid`` when what it renders is not a conversation.
    """
    scope = {"event": event}
    fields = {"id": template.id, "channel": template.channel, "title": template.title}
    rendered: dict[str, str] = {}
    for name, text in fields.items():
        if text is None:
            continue
        value = render(text, scope, field=f"trigger.conversation.{name}")
        if value not in (None, ""):
            rendered[name] = str(value)
    if "id" not in rendered:
        return None
    try:
        return check_conversation(rendered)
    except ConfigError as exc:
        raise StepFailure(
            "conversation_invalid", f"trigger.{exc.info.message}", retryable=False, details=exc.info.details
        ) from None
