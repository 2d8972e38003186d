"""Named queries for people: set, read, list, remove, and find them by role or handle."""

from __future__ import annotations

from uuid import UUID

import asyncpg

from agentflow.core.people import Person


def _person(row: asyncpg.Record) -> Person:
    return Person(**dict(row))


async def upsert(
    pool: asyncpg.Pool, workspace_id: UUID, handle: str, name: str | None, email: str | None, roles: list[str]
) -> Person:
    """Create or replace a person."""
    row = await pool.fetchrow(
        "INSERT INTO people (workspace_id, handle, name, email, roles) VALUES ($1, $2, $3, $4, $5)"
        " ON CONFLICT (workspace_id, handle) DO UPDATE SET name = excluded.name, email = excluded.email,"
        " roles = excluded.roles, updated_at = now() RETURNING *",
        workspace_id, handle, name, email, roles,
    )  # fmt: skip
    assert row is not None
    return _person(row)


async def get(pool: asyncpg.Pool, workspace_id: UUID, handle: str) -> Person | None:
    """One person, or None."""
    row = await pool.fetchrow(
        "SELECT * FROM people WHERE workspace_id = $1 AND handle = $2", workspace_id, handle
    )
    return _person(row) if row else None


async def list_people(pool: asyncpg.Pool, workspace_id: UUID, role: str | None = None) -> list[Person]:
    """Every person (holding ``role``, when given), by handle."""
    rows = await pool.fetch(
        "SELECT * FROM people WHERE workspace_id = $1 AND ($2::text IS NULL OR roles @> ARRAY[$2])"
        " ORDER BY handle",
        workspace_id, role,
    )  # fmt: skip
    return [_person(r) for r in rows]


async def delete(pool: asyncpg.Pool, workspace_id: UUID, handle: str) -> bool:
    """Remove a person; False when there was none."""
    done = await pool.execute(
        "DELETE FROM people WHERE workspace_id = $1 AND handle = $2", workspace_id, handle
    )
    return done != "DELETE 0"


async def reachable(
    pool: asyncpg.Pool, workspace_id: UUID, handles: list[str], roles: list[str]
) -> list[Person]:
    """The people with one of ``handles`` or holding one of ``roles``."""
    rows = await pool.fetch(
        "SELECT * FROM people WHERE workspace_id = $1 AND (handle = ANY($2) OR roles && $3) ORDER BY handle",
        workspace_id, handles, roles,
    )  # fmt: skip
    return [_person(r) for r in rows]
