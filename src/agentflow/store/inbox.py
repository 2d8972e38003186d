"""Named queries for run inboxes: deliver what happened to an active run, and wake it.

Events enrolled into an active run (by the dispatcher, a webhook trigger, or a change to a
task the run created) land in ``run_inbox``. The database counts each delivery on the run's
row (``runs.inbox_seq``, trigger ``run_inbox_delivered``, migration 0006) and makes a run
that waits for an event (status reason ``AWAITING_EVENT``) due at once, whatever code inserted
the row; any other run sees its new rows when a worker next loads its inbox. Delivery runs on
the caller's connection, so it commits with the caller's other effects (the dispatcher's
cursor, the task update).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.inbox import AWAITING_EVENT, Inbox, InboxItem
from agentflow.store.database import Connection

__all__ = ["AWAITING_EVENT", "deliver", "deliver_all", "load"]

# Counting the delivery and waking the run is the trigger's job (it fires for every insert).
_DELIVER = """
WITH run AS (
    SELECT workspace_id, id FROM runs WHERE workspace_id = $1 AND id = $2 AND active
), ins AS (
    INSERT INTO run_inbox (workspace_id, run_id, kind, payload)
    SELECT run.workspace_id, run.id, $3, doc FROM run, unnest($4::jsonb[]) WITH ORDINALITY AS p(doc, n)
    ORDER BY p.n
    RETURNING id
)
SELECT (SELECT count(*) FROM run) AS active, (SELECT count(*) FROM ins) AS delivered
"""


async def deliver(conn: Connection, workspace_id: UUID, run_id: UUID, kind: str, payload: Any) -> bool:
    """Put ``payload`` in the run's inbox and wake it if it waits for an event.

    Args:
        conn: the caller's connection (deliver inside the caller's transaction).
        workspace_id: the run's workspace.
        run_id: the run.
        kind: what it is: ``event`` (an enrolled event), ``task`` (a task change), ...
        payload: the JSON document the run will read.

    Returns:
        False when the run is no longer active (nothing was delivered).
    """
    return await deliver_all(conn, workspace_id, run_id, kind, [payload])


async def deliver_all(
    conn: Connection, workspace_id: UUID, run_id: UUID, kind: str, payloads: list[Any]
) -> bool:
    """Like ``deliver`` for several payloads, in order, in one statement (all or none)."""
    row = await conn.fetchrow(_DELIVER, workspace_id, run_id, kind, payloads)
    return row is not None and row["active"] > 0


# One statement, so the count and the rows come from one snapshot: every delivery counted in
# inbox_seq is among the rows, or was consumed before.
_LOAD = """
SELECT r.inbox_seq, i.id, i.kind, i.payload, i.created_at
FROM runs r LEFT JOIN LATERAL (
    SELECT id, kind, payload, created_at FROM run_inbox
    WHERE workspace_id = r.workspace_id AND run_id = r.id AND consumed_at IS NULL
    ORDER BY id LIMIT $3
) i ON true
WHERE r.workspace_id = $1 AND r.id = $2
ORDER BY i.id
"""


async def load(pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID, limit: int = 1000) -> Inbox:
    """The run's unconsumed deliveries, oldest first, with the delivery count they reflect.

    When more than ``limit`` rows are pending, the first ``limit`` come back with ``seen``
    -1, so the checkpoint that consumes them finds the inbox changed and the rest load next.
    """
    rows = await pool.fetch(_LOAD, workspace_id, run_id, limit + 1)
    if not rows:
        return Inbox()
    items = tuple(
        InboxItem(r["id"], r["kind"], r["payload"], r["created_at"]) for r in rows if r["id"] is not None
    )
    if len(items) > limit:
        return Inbox(-1, items[:limit])
    return Inbox(rows[0]["inbox_seq"], items)
