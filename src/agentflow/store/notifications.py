"""Named queries for the notification outbox: claim due rows, record delivery, list.

Rows are written by a step's checkpoint (or the reminder scan) exactly once; a notifier claims
due rows with a lease (``FOR UPDATE SKIP LOCKED``), delivers them outside any transaction, and
records the outcome fenced on its lease. Delivery is at least once: the notification id goes
with every attempt (email Message-ID, ``Idempotency-Key``) so receivers can drop repeats.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg

_CLAIM = """
WITH due AS (
    SELECT workspace_id, id FROM notifications
    WHERE status = 'pending' AND due_at <= now()
    ORDER BY due_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE notifications n SET
    lease_owner = $1,
    lease_expires_at = now() + make_interval(secs => $3),
    due_at = now() + make_interval(secs => $3),
    attempts = n.attempts + 1
FROM due WHERE n.workspace_id = due.workspace_id AND n.id = due.id
RETURNING n.workspace_id, n.id, n.run_id, n.channel, n.recipient, n.subject, n.body, n.kind, n.metadata,
          n.attempts, n.task_id, n.account_id,
          -- The run's trace, which the delivery's span joins.
          (SELECT r.trace_parent FROM runs r WHERE r.workspace_id = n.workspace_id AND r.id = n.run_id)
              AS run_trace_parent
"""


async def claim(pool: asyncpg.Pool, owner: str, limit: int, lease_seconds: float) -> list[dict[str, Any]]:
    """Claim up to ``limit`` due notifications (a lapsed lease makes a row due again)."""
    return [dict(r) for r in await pool.fetch(_CLAIM, owner, limit, lease_seconds)]


async def mark_sent(pool: asyncpg.Pool, workspace_id: UUID, note_id: UUID, owner: str) -> bool:
    """Record a delivery (fenced on the claim)."""
    row = await pool.fetchrow(
        "UPDATE notifications SET status = 'sent', sent_at = now(), last_error = NULL, lease_owner = NULL,"
        " lease_expires_at = NULL WHERE workspace_id = $1 AND id = $2 AND lease_owner = $3"
        " AND status = 'pending' RETURNING id",
        workspace_id, note_id, owner,
    )  # fmt: skip
    return row is not None


async def mark_failed(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    note_id: UUID,
    owner: str,
    error: dict[str, Any],
    retry_in: float | None,
) -> bool:
    """Record a failed attempt: due again in ``retry_in`` seconds, or failed for good (None)."""
    row = await pool.fetchrow(
        "UPDATE notifications SET last_error = $4, lease_owner = NULL, lease_expires_at = NULL,"
        " status = CASE WHEN $5::float8 IS NULL THEN 'failed' ELSE 'pending' END,"
        " due_at = CASE WHEN $5::float8 IS NULL THEN due_at"
        " ELSE now() + make_interval(secs => $5::float8) END"
        " WHERE workspace_id = $1 AND id = $2 AND lease_owner = $3 AND status = 'pending' RETURNING id",
        workspace_id, note_id, owner, error, retry_in,
    )  # fmt: skip
    return row is not None


async def seconds_to_next(pool: asyncpg.Pool) -> float | None:
    """Seconds until the earliest pending notification is due (negative: overdue)."""
    value = await pool.fetchval(
        "SELECT extract(epoch FROM min(due_at) - now())::float8 FROM notifications WHERE status = 'pending'"
    )
    return None if value is None else float(value)


async def list_notifications(
    pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID | None, limit: int
) -> list[dict[str, Any]]:
    """Notifications, newest first, optionally one run's."""
    rows = await pool.fetch(
        "SELECT id, run_id, task_id, account_id, channel, recipient, subject, body, kind, status, attempts,"
        " last_error, created_at, sent_at FROM notifications WHERE workspace_id = $1"
        " AND ($2::uuid IS NULL OR run_id = $2) ORDER BY created_at DESC, id LIMIT $3",
        workspace_id, run_id, limit,
    )  # fmt: skip
    return [dict(r) for r in rows]
