"""Find runs by the first characters of their id (what a person copies from a listing)."""

from __future__ import annotations

from uuid import UUID

import asyncpg


async def with_prefix(
    pool: asyncpg.Pool, workspace_id: UUID, low: UUID, high: UUID, limit: int
) -> list[UUID]:
    """Ids of the workspace's runs between ``low`` and ``high`` (inclusive), at most ``limit``.

    A prefix of an id's text is a range of ids: PostgreSQL orders uuids byte by byte, which is
    the order of their hex text, so the primary key answers without reading every run.
    """
    rows = await pool.fetch(
        "SELECT id FROM runs WHERE workspace_id = $1 AND id BETWEEN $2 AND $3 ORDER BY id LIMIT $4",
        workspace_id,
        low,
        high,
        limit,
    )
    return [r["id"] for r in rows]
