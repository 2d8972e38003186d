"""Named queries for workspaces (the tenants)."""

from __future__ import annotations

from uuid import UUID

import asyncpg


async def exists(pool: asyncpg.Pool, workspace_id: UUID) -> bool:
    """Whether a workspace with this id exists."""
    found = await pool.fetchval("SELECT EXISTS (SELECT 1 FROM workspaces WHERE id = $1)", workspace_id)
    return bool(found)
