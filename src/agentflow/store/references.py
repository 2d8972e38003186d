"""Which published versions use a resource (``workflow_versions.refs``; see ``core.references``).

A version counts while it can still act: it is the latest of a workflow that is not archived,
or runs of it are still active (a parked run resumes on its own version). Versions published
before references were recorded get theirs from their stored config the first time a lookup
needs them.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.config_validation import validate_config
from agentflow.core.errors import AgentflowError, ConflictError
from agentflow.core.frozen import frozen
from agentflow.core.references import references_of

log = logging.getLogger(__name__)

ACTIVE = "('created', 'in_progress', 'waiting', 'suspended')"


@frozen
class Reference:
    """A version that uses the resource.

    Attributes:
        workflow_id / workflow: the workflow.
        version: the version.
        latest: whether it is the workflow's latest version.
        enabled: whether the workflow is enabled (and not a draft or archived).
        active_runs: its runs that have not ended.
    """

    workflow_id: UUID
    workflow: str
    version: int
    latest: bool
    enabled: bool
    active_runs: int

    def to_json(self) -> dict[str, Any]:
        """The reference as the API and the CLI show it."""
        return {
            "workflow_id": str(self.workflow_id),
            "workflow": self.workflow,
            "version": self.version,
            "latest": self.latest,
            "enabled": self.enabled,
            "active_runs": self.active_runs,
        }


def stored_references(document: dict[str, Any]) -> list[str]:
    """The references of a stored config (none when it no longer parses: nothing is known)."""
    try:
        return references_of(validate_config(document, stored=True))
    except AgentflowError as exc:
        log.warning("a stored config no longer parses (%s): its references are unknown", exc)
        return []


async def fill_missing(pool: asyncpg.Pool, workspace_id: UUID) -> int:
    """Record the references of the workspace's versions that have none yet; how many."""
    rows = await pool.fetch(
        "SELECT workflow_id, version, config FROM workflow_versions WHERE workspace_id = $1 AND refs IS NULL",
        workspace_id,
    )
    for row in rows:
        await pool.execute(
            "UPDATE workflow_versions SET refs = $4 WHERE workspace_id = $1 AND workflow_id = $2"
            " AND version = $3 AND refs IS NULL",
            workspace_id,
            row["workflow_id"],
            row["version"],
            stored_references(row["config"]),
        )
    return len(rows)


_USERS = f"""
SELECT w.id AS workflow_id, w.name AS workflow, v.version, v.version = w.latest_version AS latest,
       (w.enabled AND NOT w.draft AND w.archived_at IS NULL) AS enabled,
       (SELECT count(*) FROM runs r WHERE r.workspace_id = v.workspace_id AND r.workflow_id = v.workflow_id
          AND r.workflow_version = v.version AND r.status IN {ACTIVE}) AS active_runs
FROM workflow_versions v JOIN workflows w ON w.workspace_id = v.workspace_id AND w.id = v.workflow_id
WHERE v.workspace_id = $1 AND v.refs @> ARRAY[$2::text]
  AND ((v.version = w.latest_version AND w.archived_at IS NULL) OR EXISTS (
        SELECT 1 FROM runs r WHERE r.workspace_id = v.workspace_id AND r.workflow_id = v.workflow_id
          AND r.workflow_version = v.version AND r.status IN {ACTIVE}))
ORDER BY w.name, v.version
"""


async def users(pool: asyncpg.Pool, workspace_id: UUID, ref: str) -> list[Reference]:
    """The versions that use ``ref`` (``kind:name``) and can still act, by workflow name."""
    await fill_missing(pool, workspace_id)
    rows = await pool.fetch(_USERS, workspace_id, ref)
    return [Reference(**dict(row)) for row in rows]


async def refuse_if_used(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    refs: list[str],
    *,
    doing: str,
    force: bool = False,
    ignore_workflow: UUID | None = None,
) -> None:
    """Raise unless nothing (but ``ignore_workflow``) uses any of ``refs``, or ``force``.

    Args:
        refs: the resource's references (a workflow that is an employee has two).
        doing: what is refused, for the message (``delete credential 'stripe'``).

    Raises:
        ConflictError: ``resource_in_use``, with ``details['references']``.
    """
    if force:
        return
    found: dict[tuple[UUID, int], Reference] = {}
    for ref in refs:
        for user in await users(pool, workspace_id, ref):
            if user.workflow_id != ignore_workflow:
                found[(user.workflow_id, user.version)] = user
    if found:
        names = sorted({u.workflow for u in found.values()})
        raise ConflictError(
            "resource_in_use",
            f"cannot {doing}: {', '.join(names)} use{'s' if len(names) == 1 else ''} it",
            details={"references": [u.to_json() for u in found.values()]},
            solution="Change those workflows first (publish versions without it, let their runs"
            " end), or repeat with force=true to do it anyway.",
        )
