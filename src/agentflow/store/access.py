"""Named queries for access keys and webhook signing secrets."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg


async def insert_key(
    pool: asyncpg.Pool, workspace_id: UUID, key_id: str, kind: str, name: str, secret_hash: bytes,
    role: str = "admin",
) -> dict[str, Any]:  # fmt: skip
    """Store a new key (its secret only as a hash)."""
    row = await pool.fetchrow(
        "INSERT INTO access_keys (id, workspace_id, kind, name, secret_hash, role)"
        " VALUES ($1, $2, $3, $4, $5, $6)"
        " RETURNING id, workspace_id, kind, name, role, created_at, last_used_at, revoked_at",
        key_id,
        workspace_id,
        kind,
        name,
        secret_hash,
        role,
    )
    assert row is not None
    return dict(row)


async def find_key(pool: asyncpg.Pool, key_id: str, kind: str) -> dict[str, Any] | None:
    """A live (not revoked) key by id and kind, with its secret hash."""
    row = await pool.fetchrow(
        "SELECT id, workspace_id, role, name, secret_hash, last_used_at < now() - interval '60 seconds'"
        " OR last_used_at IS NULL AS stale FROM access_keys"
        " WHERE id = $1 AND kind = $2 AND revoked_at IS NULL",
        key_id,
        kind,
    )
    return dict(row) if row else None


async def touch_key(pool: asyncpg.Pool, key_id: str) -> None:
    """Record that a key was used (callers do it at most once a minute per key)."""
    await pool.execute("UPDATE access_keys SET last_used_at = now() WHERE id = $1", key_id)


async def list_keys(pool: asyncpg.Pool, workspace_id: UUID) -> list[dict[str, Any]]:
    """The workspace's keys, newest first (never their secrets)."""
    rows = await pool.fetch(
        "SELECT id, workspace_id, kind, name, role, created_at, last_used_at, revoked_at FROM access_keys"
        " WHERE workspace_id = $1 ORDER BY created_at DESC, id",
        workspace_id,
    )
    return [dict(r) for r in rows]


async def revoke_key(pool: asyncpg.Pool, workspace_id: UUID, key_id: str) -> dict[str, Any] | None:
    """Revoke a key of the workspace (idempotent); None when there is no such key."""
    row = await pool.fetchrow(
        "UPDATE access_keys SET revoked_at = coalesce(revoked_at, now()) WHERE workspace_id = $1 AND id = $2"
        " RETURNING id, workspace_id, kind, name, role, created_at, last_used_at, revoked_at",
        workspace_id,
        key_id,
    )
    return dict(row) if row else None


async def put_secret(pool: asyncpg.Pool, workspace_id: UUID, workflow_id: UUID, ciphertext: bytes) -> None:
    """Store (or replace) a workflow's sealed signing secret."""
    await pool.execute(
        "INSERT INTO webhook_secrets (workspace_id, workflow_id, ciphertext) VALUES ($1, $2, $3)"
        " ON CONFLICT (workspace_id, workflow_id) DO UPDATE SET ciphertext = $3, created_at = now()",
        workspace_id,
        workflow_id,
        ciphertext,
    )


async def get_secret(pool: asyncpg.Pool, workspace_id: UUID, workflow_id: UUID) -> bytes | None:
    """A workflow's sealed signing secret, if it has one."""
    value: bytes | None = await pool.fetchval(
        "SELECT ciphertext FROM webhook_secrets WHERE workspace_id = $1 AND workflow_id = $2",
        workspace_id,
        workflow_id,
    )
    return value


async def delete_secret(pool: asyncpg.Pool, workspace_id: UUID, workflow_id: UUID) -> bool:
    """Remove a workflow's signing secret; False when it had none."""
    result = await pool.execute(
        "DELETE FROM webhook_secrets WHERE workspace_id = $1 AND workflow_id = $2", workspace_id, workflow_id
    )
    return result != "DELETE 0"
