"""Named queries of debounce windows: add an event to its window, claim closed windows.

A window is one row per (workflow, debounce key) plus one row per event it collected. Adding
an event pushes the window's ``fire_at`` to ``now() + seconds`` (capped at ``first_at +
max_wait``); the scheduler claims windows whose ``fire_at`` passed with ``FOR UPDATE SKIP
LOCKED`` and deletes them in the transaction that starts their run. An event added while a
window is being closed waits for that transaction and then opens a new window, so no event
falls between two windows.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from agentflow.core.frozen import frozen
from agentflow.store.database import Connection

MAX_WINDOW_EVENTS = 1000
"""A window that collected this many events closes at once."""

# The statement's clock, not the transaction's start: a dispatcher transaction may begin before
# the event it admits was received, and the window must never close early for that event.
_ADD = """
WITH w AS (
    INSERT INTO debounce_windows AS d (workspace_id, workflow_id, debounce_key, first_at, last_at,
                                       fire_at, events)
    VALUES ($1, $2, $3, clock_timestamp(), clock_timestamp(),
            CASE WHEN $6::float8 IS NULL THEN clock_timestamp() + make_interval(secs => $5)
                 ELSE clock_timestamp() + make_interval(secs => least($5, $6)) END, 1)
    ON CONFLICT (workspace_id, workflow_id, debounce_key) DO UPDATE SET
        last_at = clock_timestamp(),
        events = d.events + 1,
        -- A full window closes now: a run's trigger holds at most MAX_WINDOW_EVENTS events.
        fire_at = CASE WHEN d.events + 1 >= $7 THEN clock_timestamp()
                       WHEN $6::float8 IS NULL THEN clock_timestamp() + make_interval(secs => $5)
                       ELSE least(clock_timestamp() + make_interval(secs => $5),
                                  d.first_at + make_interval(secs => $6)) END
    RETURNING workspace_id, workflow_id, debounce_key, fire_at, events
)
INSERT INTO debounce_events (workspace_id, workflow_id, debounce_key, event)
SELECT workspace_id, workflow_id, debounce_key, $4 FROM w
RETURNING (SELECT events FROM w) AS events, (SELECT fire_at FROM w) AS fire_at
"""


async def add(
    conn: Connection,
    workspace_id: UUID,
    workflow_id: UUID,
    key: str,
    event_doc: dict[str, Any],
    seconds: float,
    max_wait: float | None,
) -> dict[str, Any]:
    """Add an event to its window (opening one if needed); return the window's count and fire time."""
    row = await conn.fetchrow(
        _ADD, workspace_id, workflow_id, key, event_doc, seconds, max_wait, MAX_WINDOW_EVENTS
    )
    assert row is not None
    return dict(row)


@frozen
class ClosedWindow:
    """A window whose time has come, locked by this transaction, with its events in order."""

    workspace_id: UUID
    workflow_id: UUID
    debounce_key: str
    events: list[dict[str, Any]]


async def claim_closed(conn: Connection, limit: int) -> list[ClosedWindow]:
    """Inside a transaction: lock up to ``limit`` windows whose ``fire_at`` passed, and delete
    them (their events go with them); the caller starts their runs in the same transaction."""
    rows = await conn.fetch(
        "WITH due AS (SELECT workspace_id, workflow_id, debounce_key FROM debounce_windows"
        "  WHERE fire_at <= now() ORDER BY fire_at LIMIT $1 FOR UPDATE SKIP LOCKED),"
        " gone AS (DELETE FROM debounce_windows d USING due WHERE d.workspace_id = due.workspace_id"
        "  AND d.workflow_id = due.workflow_id AND d.debounce_key = due.debounce_key"
        "  RETURNING d.workspace_id, d.workflow_id, d.debounce_key)"
        " SELECT g.workspace_id, g.workflow_id, g.debounce_key,"
        "  (SELECT coalesce(array_agg(e.event ORDER BY e.seq), '{}') FROM debounce_events e"
        "   WHERE e.workspace_id = g.workspace_id AND e.workflow_id = g.workflow_id"
        "   AND e.debounce_key = g.debounce_key) AS events"
        " FROM gone g",
        limit,
    )
    return [
        ClosedWindow(r["workspace_id"], r["workflow_id"], r["debounce_key"], list(r["events"])) for r in rows
    ]


async def seconds_to_next(conn: Connection) -> float | None:
    """Seconds (database clock) until the earliest window closes; None when there is none."""
    value = await conn.fetchval(
        "SELECT extract(epoch FROM min(fire_at) - clock_timestamp())::float8 FROM debounce_windows"
    )
    return None if value is None else float(value)
