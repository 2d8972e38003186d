"""Events answer the runs that wait for them (``wait`` with ``for_event``; see
``agentflow.core.graph.event_waits``).

The dispatcher calls ``answer_waits`` with each batch it reads, in the transaction that moves
its cursor: every pending wait for a topic of the batch takes the first event (in log order)
that meets its condition. The answer is the same conditional update a person's answer is, so a
batch delivered again after a crash answers nothing twice, and a wait answered by one event is
not answered by the next.
"""

from __future__ import annotations

from datetime import datetime

from agentflow.core.events import Event
from agentflow.core.graph.event_waits import event_matches
from agentflow.core.triggers import event_document
from agentflow.store import requests
from agentflow.store.database import Connection


async def answer_waits(conn: Connection, batch: list[Event], now: datetime) -> int:
    """Answer the waits the batch's events meet; return how many were answered."""
    waits = await requests.event_waits(conn, {(e.workspace_id, e.topic) for e in batch})
    answered = 0
    for wait in waits:
        for event in batch:
            if event.workspace_id != wait["workspace_id"] or event.topic != wait["topic"]:
                continue
            document = event_document(event)
            if not event_matches(wait["match"], document, now):
                continue
            if await requests.answer(
                conn, event.workspace_id, wait["id"], status="answered", outcome="answered",
                response=document, reason=None, responded_by=f"{event.topic}/{event.message_id}", via="event",
            ):  # fmt: skip
                answered += 1
            break
    return answered
