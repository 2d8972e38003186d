"""Named queries for tasks (rows that steps create inside their checkpoints)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg


async def list_tasks(
    pool: asyncpg.Pool, workspace_id: UUID, *, run_id: UUID | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    """Tasks, oldest first, optionally only those a run created."""
    rows = await pool.fetch(
        "SELECT * FROM tasks WHERE workspace_id = $1 AND ($2::uuid IS NULL OR run_id = $2)"
        " ORDER BY created_at, origin_key LIMIT $3",
        workspace_id,
        run_id,
        limit,
    )
    return [dict(r) for r in rows]
