"""Named queries for workflows and their versions."""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.errors import ConflictError
from agentflow.core.frozen import frozen
from agentflow.core.records import VersionRecord, WorkflowRecord
from agentflow.store import schedules
from agentflow.store.database import Connection


@frozen
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
    refs: list[str] | None = None,
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
                " content_hash, refs) VALUES ($1, $2, $3, $4, $5, $6)",
                workspace_id, row["id"], version, document, digest, refs,
            )  # fmt: skip
        wf_row = await conn.fetchrow(
            "UPDATE workflows SET latest_version = $3, draft = coalesce($4, draft),"
            " enabled = coalesce($5, enabled) AND archived_at IS NULL, updated_at = now()"
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


async def list_all(
    pool: asyncpg.Pool, workspace_id: UUID, archived: bool | None = False
) -> list[WorkflowRecord]:
    """The workspace's workflows by name: those not archived (``archived`` False), only the
    archived ones (True), or all (None)."""
    rows = await pool.fetch(
        "SELECT * FROM workflows WHERE workspace_id = $1"
        " AND ($2::boolean IS NULL OR (archived_at IS NOT NULL) = $2) ORDER BY name",
        workspace_id,
        archived,
    )
    return [WorkflowRecord.from_row(r) for r in rows]


async def last_runs(
    pool: asyncpg.Pool, workspace_id: UUID, workflow_ids: list[UUID]
) -> dict[UUID, dict[str, Any]]:
    """Each workflow's newest run that is no loop item (``id``, ``status``, ``created_at``,
    ``completed_at``), for those that have one: one index walk each."""
    rows = await pool.fetch(
        "SELECT w.id AS workflow_id, r.id, r.status, r.created_at, r.completed_at"
        " FROM unnest($2::uuid[]) AS w(id) CROSS JOIN LATERAL ("
        "   SELECT id, status, created_at, completed_at FROM runs"
        "   WHERE workspace_id = $1 AND workflow_id = w.id AND parent_step IS NULL"
        "   ORDER BY created_at DESC LIMIT 1) AS r",
        workspace_id, workflow_ids,
    )  # fmt: skip
    return {
        row["workflow_id"]: {k: row[k] for k in ("id", "status", "created_at", "completed_at")}
        for row in rows
    }


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
    """A version of the workflow with this id (else this name): ``version``, or the latest.

    Raises:
        ConflictError: ``workflow_archived`` (nothing starts an archived workflow).
    """
    row = await pool.fetchrow(
        "SELECT v.*, w.name, w.archived_at FROM workflows w JOIN workflow_versions v"
        " ON v.workspace_id = w.workspace_id AND v.workflow_id = w.id"
        " AND v.version = coalesce($4, w.latest_version)"
        " WHERE w.workspace_id = $1 AND (w.id = $2 OR w.name = $3)"
        " ORDER BY (w.id = $2) IS TRUE DESC LIMIT 1",
        workspace_id,
        workflow_id,
        name,
        version,
    )
    if row is not None and row["archived_at"] is not None:
        raise archived(row["name"])
    return VersionRecord.from_row(row) if row else None


def archived(name: str) -> ConflictError:
    """The error for starting an archived workflow."""
    return ConflictError(
        "workflow_archived",
        f"workflow {name!r} is archived: nothing starts it",
        solution="Unarchive it first (PATCH /api/ai/workflows/{id} with archived: false).",
    )


async def set_flags(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    workflow_id: UUID,
    *,
    draft: bool | None,
    enabled: bool | None,
    archived: bool | None = None,
) -> WorkflowRecord | None:
    """Change the draft, enabled and archived flags (None leaves a flag as it is). Archiving
    disables; an archived workflow stays disabled until it is unarchived."""
    row = await pool.fetchrow(
        "UPDATE workflows SET draft = coalesce($3, draft),"
        " archived_at = CASE WHEN $5 THEN coalesce(archived_at, now()) WHEN NOT $5 THEN NULL"
        "  ELSE archived_at END,"
        " enabled = CASE WHEN $5 THEN false ELSE coalesce($4, enabled) END,"
        " updated_at = now() WHERE workspace_id = $1 AND id = $2 RETURNING *",
        workspace_id,
        workflow_id,
        draft,
        enabled,
        archived,
    )
    return WorkflowRecord.from_row(row) if row else None


async def delete(pool: asyncpg.Pool, workspace_id: UUID, workflow_id: UUID) -> bool:
    """Delete a workflow with its versions, runs, triggers and schedules, unless a run of it is
    active (then nothing is deleted).

    Raises:
        ConflictError: ``workflow_has_active_runs``.
    """
    async with pool.acquire() as conn, conn.transaction():
        locked = await conn.fetchval(
            "SELECT name FROM workflows WHERE workspace_id = $1 AND id = $2 FOR UPDATE",
            workspace_id,
            workflow_id,
        )
        if locked is None:
            return False
        active = await conn.fetchval(
            "SELECT count(*) FROM runs WHERE workspace_id = $1 AND workflow_id = $2"
            " AND status IN ('created', 'in_progress', 'waiting', 'suspended')",
            workspace_id,
            workflow_id,
        )
        if active:
            raise ConflictError(
                "workflow_has_active_runs",
                f"workflow {locked!r} has {active} active run(s): deleting it would lose them",
                details={"active_runs": int(active)},
                solution="Cancel its runs or let them end (archive it meanwhile: nothing new starts).",
            )
        # Streamed text and steps have no foreign key to their run (migrations 0020, 0037):
        # they go first.
        for table in ("run_deltas", "run_steps"):
            await conn.execute(
                f"DELETE FROM {table} d USING runs r WHERE r.workspace_id = $1 AND r.workflow_id = $2"
                " AND d.workspace_id = r.workspace_id AND d.run_id = r.id",
                workspace_id,
                workflow_id,
            )
        await conn.execute(
            "DELETE FROM workflows WHERE workspace_id = $1 AND id = $2", workspace_id, workflow_id
        )
    return True


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
