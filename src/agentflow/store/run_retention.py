"""Retention of finished runs: delete those a workspace no longer keeps, in small batches.

A run is deleted with everything that is only about it: its steps, inbox deliveries, requests
to people and approvals (foreign keys, ``ON DELETE CASCADE``) and its streamed text. Tasks and
notifications it made stay (they are the business's records; their ``run_id`` then names a run
that is gone), as do the agent memory and dispatch decisions, which have retentions of their own.

A finished run whose parent is still active stays, whatever its age: a running loop counts its
items' rows, and a waiting parent reads its child's output.
"""

from __future__ import annotations

from uuid import UUID

import asyncpg

from agentflow.core.frozen import frozen

FINISHED = ("completed", "failed", "canceled")
BATCH = 1000

_RETENTIONS = """
SELECT id, coalesce(run_retention_days, $1::int) AS days FROM workspaces
WHERE coalesce(run_retention_days, $1::int) > 0
"""
# One batch: the oldest finished runs of a workspace past its retention, by when they ended
# (the runs_finished index), their streamed text and their steps (neither has a foreign key to
# its run), then the runs (the cascade takes inbox and requests).
_PRUNE = """
WITH doomed AS (
    SELECT r.workspace_id, r.id FROM runs r
    WHERE r.workspace_id = $1 AND r.status IN ('completed', 'failed', 'canceled')
      AND coalesce(r.completed_at, r.canceled_at, r.created_at) < now() - make_interval(days => $2::int)
      AND (r.parent_run_id IS NULL OR NOT EXISTS (
            SELECT 1 FROM runs p WHERE p.workspace_id = r.workspace_id AND p.id = r.parent_run_id
              AND p.status NOT IN ('completed', 'failed', 'canceled')))
    ORDER BY coalesce(r.completed_at, r.canceled_at, r.created_at)
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), deltas AS (
    DELETE FROM run_deltas d USING doomed
    WHERE d.workspace_id = doomed.workspace_id AND d.run_id = doomed.id
), steps AS (
    DELETE FROM run_steps s USING doomed
    WHERE s.workspace_id = doomed.workspace_id AND s.run_id = doomed.id
)
DELETE FROM runs r USING doomed WHERE r.workspace_id = doomed.workspace_id AND r.id = doomed.id
"""


@frozen
class Pruned:
    """What a retention pass deleted, per workspace (only those it deleted from)."""

    runs: dict[UUID, int]

    @property
    def total(self) -> int:
        """Runs deleted in all."""
        return sum(self.runs.values())


async def prune_runs(pool: asyncpg.Pool, default_days: int, batch: int = BATCH) -> Pruned:
    """Delete finished runs older than their workspace keeps them (``default_days`` for a
    workspace that set nothing; 0 keeps them forever), ``batch`` runs per statement."""
    deleted: dict[UUID, int] = {}
    for row in await pool.fetch(_RETENTIONS, default_days):
        while True:
            result = await pool.execute(_PRUNE, row["id"], row["days"], batch)
            count = int(result.split()[-1])
            if count:
                deleted[row["id"]] = deleted.get(row["id"], 0) + count
            if count < batch:
                break
    return Pruned(deleted)
