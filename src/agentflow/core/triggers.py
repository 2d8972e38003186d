"""Triggers: which events start a workflow, under which enrollment key, and when.

A trigger matches an event by topic (glob patterns such as ``ticket.*``) and conditions,
which are re-checked on every event so the order in which fields arrive does not matter. A
matching event either starts a run or, when a run is already active for its enrollment key,
goes to that run's inbox. Webhook calls (public and private triggers) are events too: the
same conditions, debounce, enrollment and mode apply to them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from agentflow.core import condition_explanations, conditions
from agentflow.core.condition_ops import ABSENT
from agentflow.core.condition_predicates import Predicate, compile_condition
from agentflow.core.conversations import ConversationTemplate
from agentflow.core.durations import parse_duration
from agentflow.core.events import Event
from agentflow.core.json_paths import parse_path, resolve
from agentflow.core.sources import topic_matches
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


class Debounce(BaseModel):
    """Collect a burst of events into one run (seed 002).

    Matching events with the same debounce key wait in a window; the window closes when no
    new event came for ``seconds`` (or ``max_wait`` after its first event), and then one run
    starts with the last event's payload and every event of the window in its trigger.

    Attributes:
        seconds: how long the window stays open after its latest event.
        key: a dot path into the payload (``customer.id``; a flat key ``"customer.id"`` is
            the fallback) whose value names the window. Without it, the enrollment key does
            (or, without one, a single window per workflow). An event whose payload lacks
            the key is not debounced: it is handled at once.
        max_wait: the longest a window stays open after its first event (default: no limit).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    seconds: float = Field(gt=0, le=86_400)
    key: str | None = Field(default=None, min_length=1, max_length=500)
    max_wait: timedelta | None = None

    @field_validator("seconds", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> float:
        return parse_duration(value).total_seconds()

    @field_validator("max_wait", mode="before")
    @classmethod
    def _max_wait(cls, value: Any) -> timedelta | None:
        return None if value is None else parse_duration(value)

    @field_validator("key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        if value is not None:
            parse_path(value)
        return value

    @model_validator(mode="after")
    def _bounds(self) -> Debounce:
        if self.max_wait is not None and self.max_wait.total_seconds() < self.seconds:
            raise ValueError("max_wait must be at least the debounce seconds")
        return self


# Made here: inside the class the field's name hides the module's.
_CHECKED = conditions.checked("conditions")


class Trigger(BaseModel):
    """What starts the workflow.

    Attributes:
        topics: event topics that can start it; glob patterns (``email.*``) allowed. Empty:
            only webhooks (public/private triggers) and people start it.
        conditions: conditions on the event (see ``agentflow.core.conditions``); evaluated on
            ``{"topic", "message_id", "data", "account_id", "published_at"}``.
        enrollment: the once-for rule.
        mode: when a run is active for the key: ``enroll`` the event into its inbox (default),
            ``restart`` (cancel it with a reason and start a new run), ``skip`` the event, or
            start runs in ``parallel`` (the key then only labels runs).
        debounce: collect bursts of events into one run (see ``Debounce``).
        conversation: how an event names the conversation its run answers (templates; see
            ``agentflow.core.conversations``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    topics: list[str] = Field(default_factory=list, max_length=50)
    conditions: Annotated[Any, _CHECKED] = None
    enrollment: Enrollment = Enrollment()
    mode: Mode = "enroll"
    debounce: Debounce | None = None
    conversation: ConversationTemplate | None = None
    _condition: conditions.Condition | None = PrivateAttr(default=None)
    _predicate: Predicate | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any, /) -> None:
        """Parse and compile the conditions once (validation already checked them)."""
        if self.conditions is not None:
            self._condition = conditions.parse_conditions(self.conditions)
            self._predicate = compile_condition(self._condition)

    def predicate(self) -> Predicate | None:
        """The conditions compiled (``condition_predicates``); None when there are none."""
        return self._predicate

    def condition(self) -> conditions.Condition | None:
        """The conditions parsed; None when there are none."""
        return self._condition

    @field_validator("topics")
    @classmethod
    def _topics(cls, value: list[str]) -> list[str]:
        for topic in value:
            if not topic or len(topic) > 200:
                raise ValueError("each topic pattern needs 1 to 200 characters")
        return value

    def matches_topic(self, topic: str) -> bool:
        """Whether ``topic`` is one of the trigger's topics (glob patterns)."""
        return topic_matches(self.topics, topic)


class Gate(BaseModel):
    """Ask a model whether a matching event should start the workflow (agent workflows).

    The question is asked outside any transaction; the event waits as a gate request and
    the verdict (start or not, and why) is recorded with the dispatch decision.

    Attributes:
        enabled: ask the gate (default true when the block is present).
        instructions: extra guidance for the gate, beside the workflow's prompt.
        on_error: what happens when the gate cannot answer after its attempts: ``skip`` the
            event (default) or ``start`` the run anyway.
        model: the model that decides (``provider:model``; default: the workflow's).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    model: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.:/@-]{1,200}$")
    instructions: str | None = Field(default=None, max_length=10_000)
    on_error: Literal["skip", "start"] = "skip"


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
    explanation = condition_explanations.explain(condition, event_document(event), now=now)
    return explanation.matched, explanation.to_json()


def enrollment_key(trigger: Trigger, agent_type: str | None, event: Event) -> str | None:
    """The run's enrollment key for this event (None: no once-for rule).

    Raises:
        StepFailure: ``template_error`` or ``template_limit`` when the key template does not render.
    """
    if trigger.enrollment.key is not None:
        value = render(
            trigger.enrollment.key, {"event": event_document(event)}, field="trigger.enrollment.key"
        )
        return None if value in (None, "") else str(value)
    if agent_type == "account":
        return f"account:{event.account_id}" if event.account_id else None
    if agent_type == "event":
        return f"event:{event.topic}:{event.message_id}:{event.account_id or ''}"
    return None


def debounce_key(debounce: Debounce, payload: Any, enrollment: str | None) -> str | None:
    """The window an event joins, or None when it is not debounced (its payload lacks the key).

    Scalars name the window by their JSON text (``"a-1"`` -> ``a-1``, ``7`` -> ``7``); objects
    and lists do not name one (the event is handled at once).
    """
    if debounce.key is None:
        return enrollment or ""
    value = resolve(payload, debounce.key)
    if value is ABSENT or value is None or isinstance(value, dict | list):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    return text if 0 < len(text) <= 500 else None
