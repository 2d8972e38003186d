"""Reading the parked runs of a workflow and moving one to another version, atomically.

A run is parked while no live worker holds it: created and not yet claimed, waiting, or
suspended. A move is conditioned on the run's fencing token as read, so a worker that claims
the run in between (every claim bumps the token) makes the move miss rather than change a
run under it.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.records import RunRecord

_PARKED = """
SELECT * FROM runs
WHERE workspace_id = $1 AND workflow_id = $2 AND status IN ('created', 'waiting', 'suspended')
  AND (lease_owner IS NULL OR lease_expires_at <= now()) AND parent_step IS NULL
  AND NOT state ? 'agent_node'
  AND ($3::int IS NULL OR workflow_version = $3) AND ($4::uuid[] IS NULL OR id = ANY($4))
ORDER BY created_at, id
LIMIT $5
"""


async def parked(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    workflow_id: UUID,
    *,
    from_version: int | None,
    run_ids: list[UUID] | None,
    limit: int,
) -> list[RunRecord]:
    """The workflow's parked runs (on ``from_version``, among ``run_ids``), oldest first;
    loop items and agent nodes' runs follow their parent and are never listed."""
    rows = await pool.fetch(_PARKED, workspace_id, workflow_id, from_version, run_ids, limit)
    return [RunRecord.from_row(r) for r in rows]


async def move(pool: asyncpg.Pool, run: RunRecord, to_version: int, state: dict[str, Any]) -> bool:
    """Put ``run`` on ``to_version`` with ``state``, unless it changed since it was read."""
    moved = await pool.fetchval(
        "UPDATE runs SET workflow_version = $3, state = $4, updated_at = now()"
        " WHERE workspace_id = $1 AND id = $2 AND fencing_token = $5 AND workflow_version = $6"
        " AND status IN ('created', 'waiting', 'suspended')"
        " AND (lease_owner IS NULL OR lease_expires_at <= now()) RETURNING id",
        run.workspace_id,
        run.id,
        to_version,
        state,
        run.fencing_token,
        run.workflow_version,
    )
    return moved is not None
