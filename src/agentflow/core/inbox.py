"""A run's inbox as a held run sees it: the deliveries not consumed yet, and how many it knows of.

Deliveries (enrolled events, changes to tasks the run created) land in ``run_inbox`` and are
counted on the run's row (``runs.inbox_seq``). A worker loads the unconsumed rows together
with that count; a step sees them as ``{{ inbox }}``, and the checkpoint of the step that saw
them consumes them. A checkpoint that finds the count higher than the one loaded knows that
something arrived meanwhile.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentflow.core.frozen import frozen

AWAITING_EVENT = "awaiting_event"
"""The status reason of a run in a wait that an inbox delivery cuts short."""


@frozen
class InboxItem:
    """One delivery: what it is (``event``, ``task``, ...), its document, when it arrived."""

    id: int
    kind: str
    payload: Any
    created_at: datetime

    def view(self) -> dict[str, Any]:
        """What templates see: ``{kind, payload, created_at}`` (an ISO 8601 string)."""
        return {"kind": self.kind, "payload": self.payload, "created_at": self.created_at.isoformat()}


@frozen
class Inbox:
    """The unconsumed deliveries a worker loaded, and the run's delivery count they reflect.

    Attributes:
        seen: ``runs.inbox_seq`` as of the load; -1 when the load was cut at its limit (more
            rows are pending, so the next checkpoint must treat the inbox as changed).
        items: the unconsumed rows, oldest first.
    """

    seen: int = 0
    items: tuple[InboxItem, ...] = ()

    @property
    def ids(self) -> tuple[int, ...]:
        """The rows' ids (what a checkpoint consumes)."""
        return tuple(item.id for item in self.items)

    def view(self) -> list[dict[str, Any]]:
        """The ``inbox`` template variable."""
        return [item.view() for item in self.items]

    def consumed(self) -> Inbox:
        """The inbox after a checkpoint consumed every item."""
        return Inbox(self.seen, ())


EMPTY = Inbox()
"""The inbox of a run that never received anything."""
