"""Read queries for runs and their steps (lists, details, queue figures)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.records import RunRecord, StepRecord


async def get_run(pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID) -> RunRecord | None:
    """One run."""
    row = await pool.fetchrow("SELECT * FROM runs WHERE workspace_id = $1 AND id = $2", workspace_id, run_id)
    return RunRecord.from_row(row) if row else None


async def list_runs(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    *,
    workflow_id: UUID | None,
    status: str | None,
    limit: int,
    before: UUID | None,
    loop_of: UUID | None = None,
) -> list[RunRecord]:
    """Runs newest first; ``before`` continues a listing after that run. Loop items are
    listed only under their run (``loop_of``), so a loop of 1,000 items is one run here; a
    run of another workflow that a run started (``run_workflow``) is listed."""
    rows = await pool.fetch(
        "SELECT * FROM runs WHERE workspace_id = $1"
        " AND ($2::uuid IS NULL OR workflow_id = $2)"
        " AND ($3::text IS NULL OR status = $3)"
        " AND ($6::uuid IS NULL AND (parent_step IS NULL OR caller_node IS NOT NULL)"
        "      OR parent_run_id = $6 AND parent_step IS NOT NULL)"
        " AND ($5::uuid IS NULL OR (created_at, id) <"
        "      (SELECT created_at, id FROM runs WHERE workspace_id = $1 AND id = $5))"
        " ORDER BY created_at DESC, id DESC LIMIT $4",
        workspace_id, workflow_id, status, limit, before, loop_of,
    )  # fmt: skip
    return [RunRecord.from_row(r) for r in rows]


async def list_steps(pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID) -> list[StepRecord]:
    """Every attempt of every step of a run, in order."""
    rows = await pool.fetch(
        "SELECT * FROM run_steps WHERE workspace_id = $1 AND run_id = $2 ORDER BY id",
        workspace_id,
        run_id,
    )
    return [StepRecord.from_row(r) for r in rows]


async def steps_after(
    pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID, after_id: int, limit: int = 200
) -> list[StepRecord]:
    """A run's step attempts recorded after the one with ``after_id``, in the order they were
    checkpointed (a run's checkpoints take its row lock first, so ids follow commits)."""
    rows = await pool.fetch(
        "SELECT * FROM run_steps WHERE workspace_id = $1 AND run_id = $2 AND id > $3 ORDER BY id LIMIT $4",
        workspace_id,
        run_id,
        after_id,
        limit,
    )
    return [StepRecord.from_row(r) for r in rows]


async def step_outputs(pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID) -> dict[str, Any]:
    """Outputs of a run's completed steps by node id (the latest when a node ran twice); a
    failure handled down an ``error`` port has its error as its output."""
    rows = await pool.fetch(
        "SELECT node_id, output FROM run_steps WHERE workspace_id = $1 AND run_id = $2"
        " AND (status = 'completed' OR output IS NOT NULL) AND node_id IS NOT NULL ORDER BY seq, attempt",
        workspace_id,
        run_id,
    )
    return {row["node_id"]: row["output"] for row in rows}


async def count_active(pool: asyncpg.Pool) -> int:
    """Runs that a worker will still pick up (due now or later)."""
    # Ready and held runs apart, each through its own index (runs_ready, runs_lapsed).
    return int(
        await pool.fetchval(
            "SELECT (SELECT count(*) FROM runs WHERE lease_owner IS NULL AND due_at IS NOT NULL)"
            " + (SELECT count(*) FROM runs WHERE lease_owner IS NOT NULL AND due_at IS NOT NULL)"
        )
    )


async def queue_figures(pool: asyncpg.Pool) -> dict[str, Any]:
    """Queue depth (due and unclaimed), oldest ready age, and runs by status."""
    row = await pool.fetchrow(
        "SELECT count(*) AS depth,"
        " coalesce(extract(epoch FROM clock_timestamp() - min(due_at)), 0)::float8 AS oldest"
        " FROM runs WHERE due_at <= clock_timestamp() AND lease_owner IS NULL"
    )
    by_status = await pool.fetch("SELECT status, count(*) AS n FROM runs GROUP BY status")
    return {
        "depth": int(row["depth"]) if row else 0,
        "oldest_ready_seconds": float(row["oldest"]) if row else 0.0,
        "by_status": {r["status"]: int(r["n"]) for r in by_status},
    }


_DEPTH = """
WITH RECURSIVE up (id, depth) AS (
    SELECT parent_run_id, 1 FROM runs
    WHERE workspace_id = $1 AND id = $2 AND parent_run_id IS NOT NULL
    UNION ALL
    SELECT r.parent_run_id, up.depth + 1 FROM up
    JOIN runs r ON r.workspace_id = $1 AND r.id = up.id
    WHERE r.parent_run_id IS NOT NULL AND up.depth < $3
)
SELECT coalesce(max(depth), 0) FROM up
"""


async def nesting_depth(pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID, limit: int) -> int:
    """How many runs ``run_id`` is nested in (its parent, the parent's parent, ...), counted
    up to ``limit``."""
    return int(await pool.fetchval(_DEPTH, workspace_id, run_id, limit))


_TREE_USAGE = """
WITH RECURSIVE tree (id) AS (
    SELECT id FROM runs WHERE workspace_id = $1 AND id = $2
    UNION ALL
    SELECT c.id FROM tree JOIN runs c ON c.workspace_id = $1 AND c.parent_run_id = tree.id
)
SELECT count(*) AS runs, coalesce(sum(r.input_tokens), 0) AS input_tokens,
       coalesce(sum(r.output_tokens), 0) AS output_tokens,
       coalesce(sum(r.cached_input_tokens), 0) AS cached_input_tokens,
       coalesce(sum(r.usd_cost), 0) AS usd_cost
FROM tree JOIN runs r ON r.workspace_id = $1 AND r.id = tree.id
"""


async def tree_usage(pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID) -> dict[str, Any]:
    """Model use of a run and of every run it started, however deep: ``runs``, tokens, USD."""
    row = await pool.fetchrow(_TREE_USAGE, workspace_id, run_id)
    assert row is not None  # an aggregate always answers
    return dict(row)
