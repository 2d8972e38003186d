"""Named queries for loops: how far a loop's items (child runs) are."""

from __future__ import annotations

from typing import NamedTuple
from uuid import UUID

import asyncpg

from agentflow.core.graph.looping import LoopProgress

_COUNTS = """
SELECT p.children_ended, c.*
FROM runs p
LEFT JOIN LATERAL (
    SELECT parent_step,
           count(*) FILTER (WHERE status = 'completed') AS completed,
           count(*) FILTER (WHERE status IN ('failed', 'canceled')) AS failed,
           min(item_index) FILTER (WHERE status IN ('failed', 'canceled')) AS first_failed
    FROM runs
    WHERE workspace_id = $1 AND parent_run_id = $2 AND parent_step = ANY($3::int[])
    GROUP BY parent_step
) c ON true
WHERE p.workspace_id = $1 AND p.id = $2
"""


class Counted(NamedTuple):
    """A count of a run's loop items, and of its child runs' ends as of that count (the
    run's ``children_ended``, read in the same snapshot)."""

    loops: dict[int, LoopProgress]
    children_ended: int | None


async def progress(
    pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID, loops: list[tuple[int, int]]
) -> Counted:
    """For each ``(loop step, items)`` of run ``run_id``: its items' counts, the first failed
    item's error, and every item's end once all have ended."""
    found: dict[int, LoopProgress] = {}
    totals = dict(loops)
    ended_children: int | None = None
    async with pool.acquire() as conn:
        for row in await conn.fetch(_COUNTS, workspace_id, run_id, list(totals)):
            ended_children = row["children_ended"]
            seq, first = row["parent_step"], row["first_failed"]
            if seq is None:  # no item of these loops exists yet
                continue
            error = None
            if first is not None:
                error = await conn.fetchval(
                    "SELECT error FROM runs WHERE workspace_id = $1 AND parent_run_id = $2"
                    " AND parent_step = $3 AND item_index = $4",
                    workspace_id, run_id, seq, first,
                )  # fmt: skip
            items = None
            if row["completed"] + row["failed"] >= totals[seq]:
                ended = await conn.fetch(
                    "SELECT status, output, error FROM runs WHERE workspace_id = $1 AND parent_run_id = $2"
                    " AND parent_step = $3 ORDER BY item_index",
                    workspace_id, run_id, seq,
                )  # fmt: skip
                items = [dict(r) for r in ended]
            found[seq] = LoopProgress(row["completed"], row["failed"], first, error, items)
    return Counted(found, ended_children)
