"""Named queries for workflows and their versions."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.errors import ConflictError
from agentflow.core.records import VersionRecord, WorkflowRecord
from agentflow.store import schedules
from agentflow.store.database import Connection


@dataclass(frozen=True)
class Published:
    """The outcome of publishing a config.

    Attributes:
        workflow: the workflow after publishing.
        version: the version the config is stored as.
        created: False when the content hash matched the latest version (nothing new).
    """

    workflow: WorkflowRecord
    version: VersionRecord
    created: bool


async def publish(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    *,
    name: str,
    kind: str,
    document: dict[str, Any],
    digest: str,
    draft: bool | None,
    enabled: bool | None,
    scheduled: bool = False,
) -> Published:
    """Store ``document`` as a new version of workflow ``name`` unless it is unchanged."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO workflows (workspace_id, id, name, kind, latest_version, draft, enabled)"
            " VALUES ($1, $2, $3, $4, 1, coalesce($5, false), coalesce($6, true))"
            " ON CONFLICT (workspace_id, name) DO NOTHING",
            workspace_id, uuid.uuid4(), name, kind, draft, enabled,
        )  # fmt: skip
        row = await conn.fetchrow(
            "SELECT w.*, v.content_hash AS latest_hash FROM workflows w"
            " LEFT JOIN workflow_versions v ON v.workspace_id = w.workspace_id"
            "  AND v.workflow_id = w.id AND v.version = w.latest_version"
            " WHERE w.workspace_id = $1 AND w.name = $2 FOR UPDATE OF w",
            workspace_id, name,
        )  # fmt: skip
        assert row is not None
        if row["kind"] != kind:
            raise ConflictError(
                "workflow_kind_mismatch",
                f"workflow {name!r} is of kind {row['kind']!r}; a config cannot change it to {kind!r}",
                solution="Publish the config under a new name.",
            )
        created = row["latest_hash"] != digest
        version = row["latest_version"] + 1 if row["latest_hash"] is not None else 1
        if not created:
            version = row["latest_version"]
        else:
            await conn.execute(
                "INSERT INTO workflow_versions (workspace_id, workflow_id, version, config,"
                " content_hash) VALUES ($1, $2, $3, $4, $5)",
                workspace_id, row["id"], version, document, digest,
            )  # fmt: skip
        wf_row = await conn.fetchrow(
            "UPDATE workflows SET latest_version = $3, draft = coalesce($4, draft),"
            " enabled = coalesce($5, enabled), updated_at = now()"
            " WHERE workspace_id = $1 AND id = $2 RETURNING *",
            workspace_id, row["id"], version, draft, enabled,
        )  # fmt: skip
        await schedules.sync(conn, workspace_id, row["id"], scheduled)
        v_row = await conn.fetchrow(
            "SELECT * FROM workflow_versions WHERE workspace_id = $1 AND workflow_id = $2"
            " AND version = $3",
            workspace_id, row["id"], version,
        )  # fmt: skip
    return Published(WorkflowRecord.from_row(wf_row), VersionRecord.from_row(v_row), created)


async def get(pool: asyncpg.Pool, workspace_id: UUID, workflow_id: UUID) -> WorkflowRecord | None:
    """The workflow with this id, if any."""
    row = await pool.fetchrow(
        "SELECT * FROM workflows WHERE workspace_id = $1 AND id = $2", workspace_id, workflow_id
    )
    return WorkflowRecord.from_row(row) if row else None


async def get_by_name(pool: asyncpg.Pool, workspace_id: UUID, name: str) -> WorkflowRecord | None:
    """The workflow with this name, if any."""
    row = await pool.fetchrow(
        "SELECT * FROM workflows WHERE workspace_id = $1 AND name = $2", workspace_id, name
    )
    return WorkflowRecord.from_row(row) if row else None


async def list_all(pool: asyncpg.Pool, workspace_id: UUID) -> list[WorkflowRecord]:
    """Every workflow in the workspace, by name."""
    rows = await pool.fetch("SELECT * FROM workflows WHERE workspace_id = $1 ORDER BY name", workspace_id)
    return [WorkflowRecord.from_row(r) for r in rows]


async def list_versions(pool: asyncpg.Pool, workspace_id: UUID, workflow_id: UUID) -> list[dict[str, Any]]:
    """Every version of a workflow, newest first: ``version``, ``content_hash``, ``created_at``."""
    rows = await pool.fetch(
        "SELECT version, content_hash, created_at FROM workflow_versions"
        " WHERE workspace_id = $1 AND workflow_id = $2 ORDER BY version DESC",
        workspace_id, workflow_id,
    )  # fmt: skip
    return [dict(r) for r in rows]


async def get_version(
    pool: asyncpg.Pool, workspace_id: UUID, workflow_id: UUID, version: int
) -> VersionRecord | None:
    """One version of a workflow, if it exists."""
    row = await pool.fetchrow(
        "SELECT * FROM workflow_versions WHERE workspace_id = $1 AND workflow_id = $2 AND version = $3",
        workspace_id,
        workflow_id,
        version,
    )
    return VersionRecord.from_row(row) if row else None


async def resolve_version(
    pool: asyncpg.Pool, workspace_id: UUID, *, workflow_id: UUID | None, name: str | None, version: int | None
) -> VersionRecord | None:
    """A version of the workflow with this id (else this name): ``version``, or the latest."""
    row = await pool.fetchrow(
        "SELECT v.* FROM workflows w JOIN workflow_versions v ON v.workspace_id = w.workspace_id"
        " AND v.workflow_id = w.id AND v.version = coalesce($4, w.latest_version)"
        " WHERE w.workspace_id = $1 AND (w.id = $2 OR w.name = $3)"
        " ORDER BY (w.id = $2) IS TRUE DESC LIMIT 1",
        workspace_id,
        workflow_id,
        name,
        version,
    )
    return VersionRecord.from_row(row) if row else None


async def set_flags(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    workflow_id: UUID,
    *,
    draft: bool | None,
    enabled: bool | None,
) -> WorkflowRecord | None:
    """Change the draft and enabled flags (None leaves a flag as it is)."""
    row = await pool.fetchrow(
        "UPDATE workflows SET draft = coalesce($3, draft), enabled = coalesce($4, enabled),"
        " updated_at = now() WHERE workspace_id = $1 AND id = $2 RETURNING *",
        workspace_id,
        workflow_id,
        draft,
        enabled,
    )
    return WorkflowRecord.from_row(row) if row else None


async def resolve_live(
    pool: asyncpg.Pool | Connection, workspace_id: UUID, *, workflow_id: UUID | None, name: str | None
) -> tuple[VersionRecord, bool] | None:
    """The latest version of the workflow with this id (else name), and whether it is live
    (enabled and not a draft): what a trigger starts."""
    row = await pool.fetchrow(
        "SELECT v.*, (w.enabled AND NOT w.draft) AS live FROM workflows w JOIN workflow_versions v"
        " ON v.workspace_id = w.workspace_id AND v.workflow_id = w.id AND v.version = w.latest_version"
        " WHERE w.workspace_id = $1 AND (w.id = $2 OR w.name = $3)"
        " ORDER BY (w.id = $2) IS TRUE DESC LIMIT 1",
        workspace_id,
        workflow_id,
        name,
    )
    return (VersionRecord.from_row(row), bool(row["live"])) if row else None
