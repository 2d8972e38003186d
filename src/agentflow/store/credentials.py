"""Named queries for credentials: the sealed secrets nodes reference by name.

Only ``read_sealed`` and the refresh queries return the sealed secret; everything a caller may
show goes through :class:`~agentflow.core.credentials.CredentialRecord`, which has no secret.
Token expiry is judged by the database clock (``now()``), like every lease and timer.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.credentials import CredentialRecord
from agentflow.core.frozen import frozen

_SHOWN = (
    "id, workspace_id, name, kind, metadata, secret_fields, token_expires_at, version, created_at, updated_at"
)
_COLUMNS = "workspace_id, name, kind, token_expires_at, metadata, secret, secret_fields, id"
_EXPIRY = "CASE WHEN $4::float8 IS NULL THEN NULL ELSE now() + make_interval(secs => $4::float8) END"


@frozen
class SealedRow:
    """A credential with its sealed secret, as the worker reads it to use it.

    Attributes:
        stale: its access token expires within the refresh margin (database clock): refresh it.
        expired: its access token has expired (database clock).
    """

    id: UUID
    name: str
    kind: str
    metadata: dict[str, Any]
    secret: bytes
    version: int
    stale: bool
    expired: bool = False


@frozen
class Replacement:
    """A credential's new contents: its kind, metadata and sealed secret.

    Attributes:
        secret_fields: the names of the fields sealed in ``secret``.
        expires_in: seconds the access token in it lasts (None: unknown or none).
    """

    kind: str
    metadata: dict[str, Any]
    secret: bytes
    secret_fields: list[str]
    expires_in: float | None = None


def _record(row: asyncpg.Record) -> CredentialRecord:
    return CredentialRecord(**{k: row[k] for k in _SHOWN.split(", ")})


async def insert(
    pool: asyncpg.Pool, workspace_id: UUID, credential_id: UUID, name: str, new: Replacement
) -> CredentialRecord | None:
    """Create a credential; None when the workspace already has one of that name."""
    row = await pool.fetchrow(
        f"INSERT INTO credentials ({_COLUMNS})"
        f" VALUES ($1, $2, $3, {_EXPIRY}, $5, $6, $7, $8)"
        f" ON CONFLICT (workspace_id, name) DO NOTHING RETURNING {_SHOWN}",
        workspace_id, name, new.kind, new.expires_in, new.metadata, new.secret, new.secret_fields,
        credential_id,
    )  # fmt: skip
    return _record(row) if row else None


async def put(
    pool: asyncpg.Pool, workspace_id: UUID, credential_id: UUID, name: str, new: Replacement
) -> tuple[CredentialRecord, bool]:
    """Create the credential or replace all of it (a refresh in flight loses its claim, so
    the new secret wins); returns it and whether it was created."""
    row = await pool.fetchrow(
        f"INSERT INTO credentials AS c ({_COLUMNS})"
        f" VALUES ($1, $2, $3, {_EXPIRY}, $5, $6, $7, $8)"
        " ON CONFLICT (workspace_id, name) DO UPDATE SET kind = EXCLUDED.kind, metadata = EXCLUDED.metadata,"
        " secret = EXCLUDED.secret, secret_fields = EXCLUDED.secret_fields,"
        " token_expires_at = EXCLUDED.token_expires_at, version = c.version + 1,"
        " refresh_owner = NULL, refresh_until = NULL, updated_at = now()"
        f" RETURNING {_SHOWN}, (xmax = 0) AS created",
        workspace_id, name, new.kind, new.expires_in, new.metadata, new.secret, new.secret_fields,
        credential_id,
    )  # fmt: skip
    assert row is not None
    return _record(row), bool(row["created"])


async def get(pool: asyncpg.Pool, workspace_id: UUID, name: str) -> CredentialRecord | None:
    """A credential by name, without its secret."""
    row = await pool.fetchrow(
        f"SELECT {_SHOWN} FROM credentials WHERE workspace_id = $1 AND name = $2", workspace_id, name
    )
    return _record(row) if row else None


async def list_all(pool: asyncpg.Pool, workspace_id: UUID) -> list[CredentialRecord]:
    """The workspace's credentials by name, without their secrets."""
    rows = await pool.fetch(
        f"SELECT {_SHOWN} FROM credentials WHERE workspace_id = $1 ORDER BY name", workspace_id
    )
    return [_record(row) for row in rows]


async def delete(pool: asyncpg.Pool, workspace_id: UUID, name: str) -> CredentialRecord | None:
    """Delete a credential; None when there was none."""
    row = await pool.fetchrow(
        f"DELETE FROM credentials WHERE workspace_id = $1 AND name = $2 RETURNING {_SHOWN}",
        workspace_id,
        name,
    )
    return _record(row) if row else None


_SEALED = (
    "id, name, kind, metadata, secret, version,"
    # Stale: within `margin` of expiry, or half the token's life for short-lived tokens (the
    # token was stored at updated_at), so a 30-second token is not refreshed on every use.
    " token_expires_at - least(make_interval(secs => $3::float8), (token_expires_at - updated_at) / 2)"
    " < now() AS stale, token_expires_at <= now() AS expired"
)


def _sealed(row: asyncpg.Record) -> SealedRow:
    values = (row["id"], row["name"], row["kind"], row["metadata"], row["secret"], row["version"])
    return SealedRow(*values, stale=bool(row["stale"]), expired=bool(row["expired"]))


async def read_sealed(pool: asyncpg.Pool, workspace_id: UUID, name: str, margin: float) -> SealedRow | None:
    """A credential with its sealed secret, to use it (``margin``: seconds before expiry that
    count as stale)."""
    row = await pool.fetchrow(
        f"SELECT {_SEALED} FROM credentials WHERE workspace_id = $1 AND name = $2", workspace_id, name, margin
    )
    return _sealed(row) if row else None


async def claim_refresh(
    pool: asyncpg.Pool, workspace_id: UUID, name: str, margin: float, *, seen: int, owner: UUID, ttl: float
) -> SealedRow | None:
    """Claim the right to refresh the credential's token for ``ttl`` seconds, only if its
    version is still ``seen`` and nobody holds a live claim; None otherwise."""
    row = await pool.fetchrow(
        "UPDATE credentials SET refresh_owner = $5, refresh_until = now() + make_interval(secs => $6::float8)"
        " WHERE workspace_id = $1 AND name = $2 AND version = $4"
        " AND (refresh_until IS NULL OR refresh_until <= now())"
        f" RETURNING {_SEALED}",
        workspace_id, name, margin, seen, owner, ttl,
    )  # fmt: skip
    return _sealed(row) if row else None


async def store_refreshed(
    pool: asyncpg.Pool, credential_id: UUID, owner: UUID, secret: bytes, secret_fields: list[str],
    expires_in: float | None,
) -> int | None:  # fmt: skip
    """Write refreshed tokens and release the claim, only while ``owner`` holds it; the new
    version, or None when the claim was lost (the credential was replaced, deleted, or the
    claim lapsed and another worker took it)."""
    version: int | None = await pool.fetchval(
        "UPDATE credentials SET secret = $3, secret_fields = $5,"
        f" token_expires_at = {_EXPIRY}, version = version + 1,"
        " refresh_owner = NULL, refresh_until = NULL, updated_at = now()"
        " WHERE id = $1 AND refresh_owner = $2 RETURNING version",
        credential_id, owner, secret, expires_in, secret_fields,
    )  # fmt: skip
    return version


async def release_claim(pool: asyncpg.Pool, credential_id: UUID, owner: UUID) -> None:
    """Give up a refresh claim (the token request failed), so the next attempt need not wait."""
    await pool.execute(
        "UPDATE credentials SET refresh_owner = NULL, refresh_until = NULL"
        " WHERE id = $1 AND refresh_owner = $2",
        credential_id,
        owner,
    )


async def replace_secret(
    pool: asyncpg.Pool, credential_id: UUID, seen: int, secret: bytes, secret_fields: list[str],
    expires_in: float | None,
) -> CredentialRecord | None:  # fmt: skip
    """Replace the secret of a credential still at version ``seen`` (tokens from an
    authorization code); None when it changed meanwhile. A refresh in flight is superseded."""
    row = await pool.fetchrow(
        "UPDATE credentials SET secret = $3, secret_fields = $5,"
        f" token_expires_at = {_EXPIRY}, version = version + 1,"
        " refresh_owner = NULL, refresh_until = NULL, updated_at = now()"
        f" WHERE id = $1 AND version = $2 RETURNING {_SHOWN}",
        credential_id, seen, secret, expires_in, secret_fields,
    )  # fmt: skip
    return _record(row) if row else None


async def add_consent(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    state_hash: str,
    name: str,
    redirect_uri: str,
    verifier: bytes,
    seconds: float,
) -> Any:
    """Keep a consent in flight for ``seconds`` (database clock); returns when it expires.
    Expired ones are removed on the way."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("DELETE FROM oauth2_consents WHERE expires_at <= now()")
        return await conn.fetchval(
            "INSERT INTO oauth2_consents (state_hash, workspace_id, credential_name, redirect_uri,"
            " verifier, expires_at) VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))"
            " RETURNING expires_at",
            state_hash, workspace_id, name, redirect_uri, verifier, seconds,
        )  # fmt: skip


async def take_consent(pool: asyncpg.Pool, state_hash: str) -> dict[str, Any] | None:
    """The consent of a state, once: removed as it is read; None when unknown or expired."""
    row = await pool.fetchrow(
        "DELETE FROM oauth2_consents WHERE state_hash = $1 RETURNING *, expires_at > now() AS live",
        state_hash,
    )
    return dict(row) if row is not None and row["live"] else None
