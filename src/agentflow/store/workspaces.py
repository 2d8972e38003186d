"""Named queries for workspaces (the tenants)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg


async def exists(pool: asyncpg.Pool, workspace_id: UUID) -> bool:
    """Whether a workspace with this id exists."""
    found = await pool.fetchval("SELECT EXISTS (SELECT 1 FROM workspaces WHERE id = $1)", workspace_id)
    return bool(found)


_COLUMNS = "id, name, created_at, run_retention_days"


async def create(pool: asyncpg.Pool, workspace_id: UUID, name: str) -> dict[str, Any] | None:
    """Insert a workspace; None when another already has ``name``."""
    row = await pool.fetchrow(
        "INSERT INTO workspaces (id, name) VALUES ($1, $2)"
        f" ON CONFLICT (name) DO NOTHING RETURNING {_COLUMNS}",
        workspace_id,
        name,
    )
    return dict(row) if row else None


async def list_all(pool: asyncpg.Pool) -> list[dict[str, Any]]:
    """Every workspace, by name."""
    return [dict(r) for r in await pool.fetch(f"SELECT {_COLUMNS} FROM workspaces ORDER BY name")]


async def get(pool: asyncpg.Pool, workspace_id: UUID) -> dict[str, Any] | None:
    """One workspace, or None."""
    row = await pool.fetchrow(f"SELECT {_COLUMNS} FROM workspaces WHERE id = $1", workspace_id)
    return dict(row) if row else None


async def rename(pool: asyncpg.Pool, workspace_id: UUID, name: str) -> dict[str, Any] | None:
    """Rename a workspace; None when there is no such workspace.

    Raises:
        asyncpg.UniqueViolationError: another workspace already has ``name``.
    """
    row = await pool.fetchrow(
        f"UPDATE workspaces SET name = $2 WHERE id = $1 RETURNING {_COLUMNS}", workspace_id, name
    )
    return dict(row) if row else None


async def set_run_retention(
    pool: asyncpg.Pool, workspace_id: UUID, days: int | None
) -> dict[str, Any] | None:
    """Keep the workspace's finished runs ``days`` days (None: the server's default); None when
    there is no such workspace."""
    sql = f"UPDATE workspaces SET run_retention_days = $2 WHERE id = $1 RETURNING {_COLUMNS}"
    row = await pool.fetchrow(sql, workspace_id, days)
    return dict(row) if row else None
