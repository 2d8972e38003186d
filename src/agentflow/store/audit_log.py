"""Named queries for the audit log (``audit_log``): begin an entry when an audited request is
authenticated, finish it with the answer's status, list a workspace's entries newest first.

Beginning before the handler runs and finishing after it means a change is never unrecorded:
a server that dies between the two leaves an entry without a status ("outcome unknown").
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.store.database import UNAVAILABLE_ERRORS

logger = logging.getLogger(__name__)

_COLUMNS = "id, at, actor, actor_name, role, action, method, route, target, status, finished_at"


async def begin(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    *,
    actor: str,
    actor_name: str | None,
    role: str,
    action: str,
    method: str,
    route: str,
    target: dict[str, Any],
) -> int:
    """Record that ``actor`` asked for ``action``; the entry's id (to finish it with)."""
    entry: int = await pool.fetchval(
        "INSERT INTO audit_log (workspace_id, actor, actor_name, role, action, method, route, target)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
        workspace_id, actor, actor_name, role, action, method, route, target,
    )  # fmt: skip
    return entry


async def finish(
    pool: asyncpg.Pool, workspace_id: UUID, entry: int, *, status: int, noted: dict[str, Any]
) -> None:
    """Record the answer's status, and what the handler noted about its target.

    While the database is unavailable the entry stays begun (its outcome unknown, not lost):
    a warning is logged and the answer goes out all the same.
    """
    try:
        await pool.execute(
            "UPDATE audit_log SET status = $3, finished_at = now(), target = target || $4"
            " WHERE workspace_id = $1 AND id = $2",
            workspace_id, entry, status, noted,
        )  # fmt: skip
    except UNAVAILABLE_ERRORS as exc:
        logger.warning("audit: could not record the status of entry %s: %r", entry, exc)


async def list_entries(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    *,
    action: str | None = None,
    actor: str | None = None,
    workflow: tuple[str, ...] = (),
    since: datetime | None = None,
    until: datetime | None = None,
    before: int | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """Entries newest first, filtered; ``workflow``: the ids and names a workflow is known by
    (a path may name it either way); ``before``: the previous page's last entry id."""
    rows = await pool.fetch(
        f"SELECT {_COLUMNS} FROM audit_log WHERE workspace_id = $1"
        " AND ($2::text IS NULL OR action = $2 OR action LIKE $2 || '.%')"
        " AND ($3::text IS NULL OR actor = $3)"
        " AND (cardinality($4::text[]) = 0 OR (target ? 'workflow_id' AND target->>'workflow_id' = ANY($4)))"
        " AND ($5::timestamptz IS NULL OR at >= $5) AND ($6::timestamptz IS NULL OR at < $6)"
        " AND ($7::bigint IS NULL OR id < $7)"
        " ORDER BY id DESC LIMIT $8",
        workspace_id, action, actor, list(workflow), since, until, before, limit,
    )  # fmt: skip
    return [dict(r) for r in rows]


async def prune(pool: asyncpg.Pool, older_than_days: int) -> int:
    """Delete entries older than ``older_than_days`` in every workspace; how many went."""
    done = await pool.execute(
        "DELETE FROM audit_log WHERE at < now() - make_interval(days => $1)", older_than_days
    )
    return int(done.split()[-1])
