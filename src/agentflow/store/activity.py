"""Named queries for the activity series (the console's charts): runs by status, tasks
created and completed, and cost, per time bucket; cost per workflow.

Runs are counted where they were created, through the index by status (one range scan per
status); tasks by their own times. Buckets are ``date_trunc`` of UTC times.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

STATUSES = ("created", "in_progress", "waiting", "suspended", "completed", "failed", "canceled")

_RUNS = """
SELECT date_trunc($4, r.created_at AT TIME ZONE 'UTC') AS bucket, r.status, r.workflow_id,
       count(*) AS runs, coalesce(sum(r.usd_cost), 0) AS usd_cost,
       coalesce(sum(r.input_tokens + r.output_tokens), 0) AS tokens
FROM runs r
WHERE r.workspace_id = $1 AND r.status = ANY($5::text[]) AND r.created_at >= $2 AND r.created_at < $3
  AND ($6::uuid IS NULL OR r.workflow_id = $6)
GROUP BY 1, 2, 3
"""

_TASKS_CREATED = """
SELECT date_trunc($4, t.created_at AT TIME ZONE 'UTC') AS bucket, count(*) AS tasks
FROM tasks t
LEFT JOIN runs r ON r.workspace_id = t.workspace_id AND r.id = t.run_id
WHERE t.workspace_id = $1 AND t.created_at >= $2 AND t.created_at < $3
  AND ($5::uuid IS NULL OR r.workflow_id = $5)
GROUP BY 1
"""

_TASKS_COMPLETED = """
SELECT date_trunc($4, t.completed_at AT TIME ZONE 'UTC') AS bucket,
       count(*) FILTER (WHERE t.due_at IS NULL OR t.completed_at <= t.due_at) AS on_time,
       count(*) FILTER (WHERE t.completed_at > t.due_at) AS late
FROM tasks t
LEFT JOIN runs r ON r.workspace_id = t.workspace_id AND r.id = t.run_id
WHERE t.workspace_id = $1 AND t.status = 'completed' AND t.completed_at >= $2 AND t.completed_at < $3
  AND ($5::uuid IS NULL OR r.workflow_id = $5)
GROUP BY 1
"""


async def activity_rows(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    *,
    since: datetime,
    until: datetime,
    unit: str,
    workflow_id: UUID | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(runs by bucket, status and workflow; tasks created by bucket; tasks completed by
    bucket) in ``[since, until)``; ``unit``: ``hour`` or ``day``."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        runs = await conn.fetch(_RUNS, workspace_id, since, until, unit, list(STATUSES), workflow_id)
        created = await conn.fetch(_TASKS_CREATED, workspace_id, since, until, unit, workflow_id)
        completed = await conn.fetch(_TASKS_COMPLETED, workspace_id, since, until, unit, workflow_id)
    return [dict(r) for r in runs], [dict(r) for r in created], [dict(r) for r in completed]


async def workflow_names(pool: asyncpg.Pool, workspace_id: UUID, ids: list[UUID]) -> dict[UUID, str]:
    """The names of these workflows."""
    rows = await pool.fetch(
        "SELECT id, name FROM workflows WHERE workspace_id = $1 AND id = ANY($2::uuid[])", workspace_id, ids
    )
    return {r["id"]: r["name"] for r in rows}
