"""Creating a workspace row (the tenant every other row points at) when it is missing."""

from __future__ import annotations

from uuid import UUID

import asyncpg


async def ensure_workspace(pool: asyncpg.Pool, workspace_id: UUID, name: str) -> str:
    """Create the workspace ``workspace_id`` named ``name`` unless it exists; return its name.

    Raises:
        asyncpg.UniqueViolationError: another workspace already has ``name``.
    """
    stored: str | None = await pool.fetchval(
        "INSERT INTO workspaces (id, name) VALUES ($1, $2)"
        " ON CONFLICT (id) DO UPDATE SET name = workspaces.name RETURNING name",
        workspace_id,
        name,
    )
    assert stored is not None  # RETURNING yields the row, inserted or kept
    return stored
