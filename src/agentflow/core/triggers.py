"""Event triggers: which events start a workflow, and under which enrollment key.

A trigger matches an event by topic (glob patterns such as ``ticket.*``) and conditions,
which are re-checked on every event so the order in which fields arrive does not matter. A
matching event either starts a run or, when a run is already active for its enrollment key,
goes to that run's inbox.
"""

from __future__ import annotations

import fnmatch
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from agentflow.core import conditions
from agentflow.core.events import Event
from agentflow.core.templating import render

ReusePolicy = Literal["allow", "allow_if_failed", "reject"]
Mode = Literal["enroll", "parallel", "restart", "skip"]


class Enrollment(BaseModel):
    """The "once-for" rule.

    Attributes:
        key: a template rendered with ``event`` (``{{ event.data.account_id }}``); runs with the
            same key never overlap. Without one, agent workflows key on the account (type
            ``account``) or on event id + account (type ``event``); structured ones have none.
        reuse: after the key's run ended: ``allow`` a new run, ``allow_if_failed`` only when it
            failed (or was canceled), or ``reject`` forever.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str | None = Field(default=None, min_length=1, max_length=500)
    reuse: ReusePolicy = "allow"


class Trigger(BaseModel):
    """What starts the workflow.

    Attributes:
        topics: event topics that can start it; glob patterns (``email.*``) allowed.
        conditions: conditions on the event (see ``agentflow.core.conditions``); evaluated on
            ``{"topic", "message_id", "data", "account_id", "published_at"}``.
        enrollment: the once-for rule.
        mode: when a run is active for the key: ``enroll`` the event into its inbox (default),
            ``restart`` (cancel it with a reason and start a new run), ``skip`` the event, or
            start runs in ``parallel`` (the key then only labels runs).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    topics: list[str] = Field(min_length=1, max_length=50)
    conditions: Any = None
    enrollment: Enrollment = Enrollment()
    mode: Mode = "enroll"
    _condition: conditions.Condition | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any, /) -> None:
        """Parse the conditions once (validation already checked them)."""
        if self.conditions is not None:
            self._condition = conditions.parse_conditions(self.conditions)

    @field_validator("topics")
    @classmethod
    def _topics(cls, value: list[str]) -> list[str]:
        for topic in value:
            if not topic or len(topic) > 200:
                raise ValueError("each topic pattern needs 1 to 200 characters")
        return value

    @field_validator("conditions")
    @classmethod
    def _conditions(cls, value: Any) -> Any:
        if value is not None:
            _parsed, errors = conditions.check_conditions(value, "conditions")
            if errors:
                raise ValueError("; ".join(f"{e['path']}: {e['message']}" for e in errors))
        return value

    def matches_topic(self, topic: str) -> bool:
        """Whether ``topic`` is one of the trigger's topics (glob patterns)."""
        return any(fnmatch.fnmatchcase(topic, pattern) for pattern in self.topics)


def event_document(event: Event) -> dict[str, Any]:
    """What conditions and key templates see of an event."""
    return {
        "topic": event.topic,
        "message_id": event.message_id,
        "data": event.data,
        "account_id": event.account_id,
        "published_at": event.published_at.isoformat(),
    }


def conditions_hold(trigger: Trigger, event: Event, now: datetime) -> tuple[bool, Any]:
    """Whether the event meets the trigger's conditions, and why (JSON)."""
    condition = trigger._condition
    if condition is None:
        return True, None
    explanation = conditions.explain(condition, event_document(event), now=now)
    return explanation.matched, explanation.to_json()


def enrollment_key(trigger: Trigger, agent_type: str | None, event: Event) -> str | None:
    """The run's enrollment key for this event (None: no once-for rule).

    Raises:
        StepFailure: code ``template_error`` when the key template does not render.
    """
    if trigger.enrollment.key is not None:
        value = render(trigger.enrollment.key, {"event": event_document(event)})
        return None if value in (None, "") else str(value)
    if agent_type == "account":
        return f"account:{event.account_id}" if event.account_id else None
    if agent_type == "event":
        return f"event:{event.topic}:{event.message_id}:{event.account_id or ''}"
    return None
