"""Named queries of the scheduler: keep schedule rows in step with versions, claim due ones."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from agentflow.core.frozen import frozen
from agentflow.store.database import WAKE_CHANNEL, Connection


async def sync(conn: Connection, workspace_id: UUID, workflow_id: UUID, scheduled: bool) -> None:
    """After publishing: make sure a scheduled workflow has a row (its next fire is recomputed
    at the next tick, as the schedule may have changed), and an unscheduled one has none."""
    if scheduled:
        await conn.execute(
            "INSERT INTO schedules (workspace_id, workflow_id) VALUES ($1, $2)"
            " ON CONFLICT (workspace_id, workflow_id) DO UPDATE SET next_fire_at = NULL, updated_at = now()",
            workspace_id,
            workflow_id,
        )
    else:
        await conn.execute(
            "DELETE FROM schedules WHERE workspace_id = $1 AND workflow_id = $2", workspace_id, workflow_id
        )


@frozen
class DueSchedule:
    """A claimed schedule row with its workflow's latest version."""

    workspace_id: UUID
    workflow_id: UUID
    version: int
    config: dict[str, Any]
    active: bool  # enabled and not a draft
    last_fire: datetime | None
    next_fire_at: datetime | None


async def claim_due(conn: Connection, limit: int) -> tuple[datetime, list[DueSchedule]]:
    """Inside a transaction: the database time, and due schedules locked for this tick."""
    now: datetime = await conn.fetchval("SELECT now()")
    rows = await conn.fetch(
        "SELECT s.workspace_id, s.workflow_id, s.last_fire, s.next_fire_at, w.latest_version AS version,"
        " v.config, (w.enabled AND NOT w.draft) AS active FROM schedules s"
        " JOIN workflows w ON w.workspace_id = s.workspace_id AND w.id = s.workflow_id"
        " JOIN workflow_versions v ON v.workspace_id = w.workspace_id AND v.workflow_id = w.id"
        "  AND v.version = w.latest_version"
        " WHERE s.next_fire_at IS NULL OR s.next_fire_at <= now()"
        " ORDER BY s.next_fire_at NULLS FIRST LIMIT $1 FOR UPDATE OF s SKIP LOCKED",
        limit,
    )
    return now, [DueSchedule(**dict(r)) for r in rows]


async def advance(
    conn: Connection,
    workspace_id: UUID,
    workflow_id: UUID,
    last_fire: datetime | None,
    next_fire_at: datetime | None,
) -> None:
    """Store the catch-up cursor and the next fire time (NULL-free unless the schedule ended)."""
    await conn.execute(
        "UPDATE schedules SET last_fire = $3, next_fire_at = coalesce($4::timestamptz, 'infinity'),"
        " updated_at = now()"
        " WHERE workspace_id = $1 AND workflow_id = $2",
        workspace_id,
        workflow_id,
        last_fire,
        next_fire_at,
    )


async def start_scheduled(
    conn: Connection,
    workspace_id: UUID,
    workflow_id: UUID,
    version: int,
    fire: datetime,
    state: dict[str, Any],
    *,
    trace_parent: str | None = None,
) -> UUID:
    """Start one run for one fire time (its payload says when it was due), under the span
    ``trace_parent`` names (the scheduler's, when tracing is on)."""
    run_id: UUID = await conn.fetchval(
        "INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state, trigger,"
        " due_at, trace_parent) VALUES ($1, gen_random_uuid(), $2, $3, 'created', $4, $5, $6, now(), $7)"
        f" RETURNING id, pg_notify('{WAKE_CHANNEL}', '') IS NULL",
        workspace_id,
        workflow_id,
        version,
        {"scheduled_at": fire.isoformat()},
        state,
        {"source": "schedule", "scheduled_at": fire.isoformat()},
        trace_parent,
    )
    return run_id


async def seconds_to_next(conn: Connection) -> float | None:
    """Seconds until the earliest schedule is due (0 for a new one), on the database clock."""
    value = await conn.fetchval(
        "SELECT CASE WHEN bool_or(next_fire_at IS NULL) THEN 0"
        " ELSE extract(epoch FROM min(next_fire_at) - clock_timestamp()) END::float8 FROM schedules"
        " WHERE next_fire_at IS NULL OR next_fire_at < 'infinity'"
    )
    return None if value is None else float(value)
