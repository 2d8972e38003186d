"""A ``wait`` for an event (``for_event``; Inngest's ``waitForEvent``): the run waits until an
event of ``topic`` that meets ``match`` is published, or its time runs out.

``match`` is a condition in the trigger condition language (``agentflow.core.conditions``) on
the event document (``topic``, ``message_id``, ``data``, ``account_id``, ``published_at``);
its values may be templates, rendered when the wait starts, so a run waits for *its* event
(``{path: data.order_id, op: equals, value: "{{ payload.order_id }}"}``). The wait's step
writes the rendered condition in a request of kind ``event``; the dispatcher, which reads every
event, answers the first pending wait whose topic and condition an event meets, in the
transaction that moves its cursor, and the run goes on with the event as the wait's output.
Only events the dispatcher reads after the wait's step committed can match.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentflow.core import conditions
from agentflow.core.events import TOPIC_PATTERN
from agentflow.core.templating import has_templates

EVENT_SCHEMA: dict[str, Any] = {
    "type": ["object", "null"],
    "properties": {
        "topic": {"type": "string"},
        "message_id": {"type": "string"},
        "data": {},
        "account_id": {"type": ["string", "null"]},
        "published_at": {"type": "string", "format": "date-time"},
    },
    "additionalProperties": False,
}
"""What a wait for an event outputs: the event that matched, or null when the time ran out."""


class EventWait(BaseModel):
    """The event a ``wait`` waits for."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    topic: str = Field(pattern=TOPIC_PATTERN, description="The event's topic (exact).")
    match: Any = Field(
        default=None,
        description="A condition on the event (trigger condition language); values may be templates.",
    )

    @model_validator(mode="after")
    def _match(self) -> EventWait:
        if self.match is not None and not has_templates(self.match):
            _condition, errors = conditions.check_conditions(self.match, "match")
            if errors:
                raise ValueError("; ".join(f"{e['path']}: {e['message']}" for e in errors[:5]))
        return self


def event_matches(match: Any, document: dict[str, Any], now: datetime) -> bool:
    """Whether an event document meets a wait's rendered ``match`` (None: any event of the topic).
    A condition that no longer parses matches nothing."""
    if match is None:
        return True
    condition, errors = conditions.check_conditions(match, "match")
    return condition is not None and not errors and conditions.evaluate(condition, document, now=now)
