"""Events: what the outside world publishes, validated before it reaches the log."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from agentflow.core.frozen import frozen

TOPIC_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:\-/]{0,199}$"
MAX_BATCH = 1000


class EventIn(BaseModel):
    """An event to publish.

    Attributes:
        topic: what happened, e.g. ``email.received`` or ``task.updated``.
        message_id: the publisher's id; publishing the same (topic, message_id) again returns
            the stored event instead of a duplicate. A time-ordered id is made when absent.
        data: the payload (a JSON object).
        published_at: when the publisher says it happened (default: when it was received).
        account_id: the account the event is about, for "what changed for this account";
            taken from ``data.account_id`` when not given.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str = Field(pattern=TOPIC_PATTERN)
    message_id: str | None = Field(default=None, min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")
    data: dict[str, Any] = Field(default_factory=dict)
    published_at: AwareDatetime | None = None
    account_id: str | None = Field(default=None, min_length=1, max_length=200)

    def resolved_account(self) -> str | None:
        """The explicit account id, else a string or number ``data.account_id``."""
        if self.account_id is not None:
            return self.account_id
        value = self.data.get("account_id")
        return str(value) if isinstance(value, str | int) and not isinstance(value, bool) else None


@frozen
class Position:
    """A place in the log: after the event at (xid, seq)."""

    xid: int
    seq: int

    @classmethod
    def start(cls) -> Position:
        """Before every event."""
        return cls(0, 0)


@frozen
class Event:
    """A stored event."""

    workspace_id: UUID
    topic: str
    message_id: str
    xid: int
    seq: int
    data: dict[str, Any]
    account_id: str | None
    published_at: datetime
    received_at: datetime
    trace_parent: str | None = None  # the span it was published in (W3C traceparent)

    @property
    def position(self) -> Position:
        """Where this event is in the log."""
        return Position(self.xid, self.seq)


@frozen
class Publication:
    """The outcome of publishing one event: the stored event, and whether it is new."""

    event: Event
    created: bool
