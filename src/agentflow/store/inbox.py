"""Named queries for run inboxes: deliver what happened to an active run, and wake it.

Events enrolled into an active run (by the dispatcher, a webhook trigger, or a change to a
task the run created) land in ``run_inbox``. A run that waits for such an event (its status
reason is ``AWAITING_EVENT``) becomes due at once; any other run reads its new inbox rows at
its next step. Delivery runs on the caller's connection, so it commits with the caller's
other effects (the dispatcher's cursor, the task update).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from agentflow.store.database import WAKE_CHANNEL, Connection

AWAITING_EVENT = "awaiting_event"
"""The status reason of a waiting run that an inbox delivery wakes early."""

_DELIVER = f"""
WITH run AS (
    SELECT workspace_id, id FROM runs WHERE workspace_id = $1 AND id = $2 AND active
), ins AS (
    INSERT INTO run_inbox (workspace_id, run_id, kind, payload)
    SELECT workspace_id, id, $3, $4 FROM run RETURNING id
), woken AS (
    UPDATE runs r SET due_at = now(), updated_at = now()
    FROM run WHERE r.workspace_id = run.workspace_id AND r.id = run.id
      AND r.status = 'waiting' AND r.status_reason = '{AWAITING_EVENT}' AND r.due_at > now()
    RETURNING pg_notify('{WAKE_CHANNEL}', '')
)
SELECT (SELECT id FROM ins) AS inbox_id, (SELECT count(*) FROM woken) AS woken
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
    row = await conn.fetchrow(_DELIVER, workspace_id, run_id, kind, payload)
    return row is not None and row["inbox_id"] is not None


async def pending(conn: Connection, workspace_id: UUID, run_id: UUID, limit: int = 100) -> list[dict[str, Any]]:
    """The run's inbox rows not consumed yet, oldest first."""
    rows = await conn.fetch(
        "SELECT id, kind, payload, created_at FROM run_inbox"
        " WHERE workspace_id = $1 AND run_id = $2 AND consumed_at IS NULL ORDER BY id LIMIT $3",
        workspace_id,
        run_id,
        limit,
    )
    return [dict(r) for r in rows]
