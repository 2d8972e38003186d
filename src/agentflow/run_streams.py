"""Following a run as it goes (issue 12): its status, each step as it is checkpointed, and a
model's text while it is written, as events with resumable offsets.

An event's ``id`` is the stream's cursor, ``<step id>-<delta xid>-<delta seq>``: pass the last
one back (``Last-Event-ID``) to go on from there after a disconnect or a server restart.
Steps come in checkpoint order (a run's checkpoints are serialised on its row) and deltas
below the horizon in (xid, seq) order, so resuming neither skips nor repeats either. Deltas
are best-effort and pruned after a day; a step's result is its checkpoint, which the ``step``
event carries.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

from agentflow.core.errors import ConfigError
from agentflow.core.frozen import frozen
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.records import RunRecord
from agentflow.store import reads, run_deltas
from agentflow.store.database import Database

POLL_SECONDS = 0.1
HEARTBEAT_SECONDS = 15.0
STREAM_SECONDS = 600.0
"""How long one connection lasts; the client resumes with the last id."""
_CURSOR = re.compile(r"^(\d{1,19})-(\d{1,20})-(\d{1,19})$")


@frozen
class Cursor:
    """Where a reader is: the last step row and the last delta it has seen."""

    step_id: int = 0
    xid: int = 0
    seq: int = 0

    def __str__(self) -> str:
        return f"{self.step_id}-{self.xid}-{self.seq}"

    @classmethod
    def parse(cls, text: str | None) -> Cursor:
        """The cursor an event id names (None or empty: the start).

        Raises:
            ConfigError: ``stream_cursor_invalid``.
        """
        if not text:
            return cls()
        found = _CURSOR.match(text.strip())
        if found is None:
            raise ConfigError(
                "stream_cursor_invalid",
                f"{text[:80]!r} is not an event id of this stream",
                solution="Send the id of the last event received (Last-Event-ID), or none to start over.",
            )
        return cls(int(found[1]), int(found[2]), int(found[3]))


START = Cursor()
"""Before the first step and the first delta."""


@frozen
class StreamEvent:
    """One event: ``status``, ``step``, ``delta`` (text), ``restart`` or ``end``."""

    kind: str
    data: dict[str, Any]
    cursor: Cursor


class RunStreams:
    """Follow the runs of a workspace."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def follow(
        self,
        run: RunRecord,
        after: Cursor = START,
        *,
        workspace_id: UUID = DEFAULT_WORKSPACE,
        seconds: float = STREAM_SECONDS,
    ) -> AsyncIterator[StreamEvent | None]:
        """Events of ``run`` after ``after``, until it ends (``end``) or ``seconds`` pass; None
        now and then while nothing happens (for a heartbeat)."""
        pool = self.db.pool
        cursor, status, started, quiet = after, None, time.monotonic(), time.monotonic()
        while True:
            current = await reads.get_run(pool, workspace_id, run.id)
            assert current is not None
            if (current.status, current.status_reason) != status:
                status = (current.status, current.status_reason)
                told: dict[str, Any] = {"status": current.status.value, "reason": current.status_reason}
                yield StreamEvent("status", told, cursor)
            sent = False
            for step in await reads.steps_after(pool, workspace_id, run.id, cursor.step_id):
                cursor = Cursor(step.id, cursor.xid, cursor.seq)
                yield StreamEvent("step", _step(step), cursor)
                sent = True
            for delta in await run_deltas.after(pool, workspace_id, run.id, (cursor.xid, cursor.seq)):
                cursor = Cursor(cursor.step_id, delta.xid, delta.seq)
                data: dict[str, Any] = {"step": delta.step, "attempt": delta.attempt}
                if delta.kind == "text":
                    data["text"] = delta.data
                yield StreamEvent("delta" if delta.kind == "text" else "restart", data, cursor)
                sent = True
            now = time.monotonic()
            if current.status.is_terminal and not sent:
                yield StreamEvent("end", {"status": current.status.value}, cursor)
                return
            if now - started >= seconds:
                return
            if sent:
                quiet = now
            elif now - quiet >= HEARTBEAT_SECONDS:
                quiet = now
                yield None
            if not sent:
                await asyncio.sleep(POLL_SECONDS)


def _step(step: Any) -> dict[str, Any]:
    return {
        "seq": step.seq,
        "attempt": step.attempt,
        "node_id": step.node_id,
        "kind": step.kind,
        "name": step.name,
        "status": step.status,
        "output": step.output,
        "error": step.error,
        "finished_at": step.finished_at.isoformat(),
    }
