"""The claim as it was before issue 10, for R11's negative control: it orders lapsed leases
behind the ready backlog and counts every lapsed lease as a rescue, even when the lost
worker never began the run's step.

A worker process uses it when started with ``prelude=SABOTAGE``.
"""

from __future__ import annotations

import asyncpg

from agentflow.core.records import RunRecord
from agentflow.store.runs import Claimed

SABOTAGE = "import agentflow.store.runs as r; from tests.support.naive_claim import claim; r.claim = claim"

_NAIVE_CLAIM = """
WITH due AS (
    SELECT ctid AS tid,
           CASE WHEN cancel_requested THEN 'canceled'
                WHEN lease_owner IS NOT NULL AND rescues >= $4 THEN 'failed'
                ELSE 'in_progress' END AS verdict,
           (lease_owner IS NOT NULL) AS rescued
    FROM runs
    WHERE due_at <= now()
    ORDER BY due_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE runs r SET
    status = due.verdict,
    status_reason = CASE due.verdict WHEN 'failed' THEN 'worker_lost'
                                     WHEN 'canceled' THEN 'canceled_by_request' END,
    error = CASE WHEN due.verdict = 'failed' THEN jsonb_build_object(
                'code', 'worker_lost',
                'message', format('the worker running step %s was lost %s times in a row',
                                  r.step_seq, r.rescues + 1),
                'solution', 'Find why workers die on this step (logs, memory), then retry the run.')
            ELSE r.error END,
    rescues = r.rescues + due.rescued::int,
    fencing_token = r.fencing_token + 1,
    lease_owner = CASE WHEN due.verdict = 'in_progress' THEN $1 END,
    lease_expires_at = CASE WHEN due.verdict = 'in_progress'
                            THEN now() + make_interval(secs => $3) END,
    due_at = CASE WHEN due.verdict = 'in_progress' THEN now() + make_interval(secs => $3) END,
    started_at = coalesce(r.started_at, now()),
    completed_at = CASE WHEN due.verdict = 'failed' THEN now() ELSE r.completed_at END,
    canceled_at = CASE WHEN due.verdict = 'canceled' THEN now() ELSE r.canceled_at END,
    updated_at = now()
FROM due
-- Join on the physical row: a Tid scan whatever the table's size (a join on the key can be
-- planned as a scan of every run). If a row changes between this statement's snapshot and
-- its lock, it is skipped and the next claim takes it.
WHERE r.ctid = due.tid
RETURNING r.*, due.rescued
"""


async def claim(
    pool: asyncpg.Pool,
    owner: str,
    limit: int,
    lease_ttl: float,
    max_rescues: int,
    max_unstarted_rescues: int | None = None,
    *,
    tell_failed: object = None,
    tell_canceled: object = None,
    code: bool = True,
) -> list[Claimed]:
    """The naive claim, with the signature of ``agentflow.store.runs.claim`` (it tells no
    lifecycle event: R11 listens to none; it has no code steps to route)."""
    rows = await pool.fetch(_NAIVE_CLAIM, owner, limit, lease_ttl, max_rescues)
    # was_running: every claimed run is caught up with steps written ahead, as before the claim told
    return [Claimed(RunRecord.from_row(r), r["rescued"], r["inbox_seq"], was_running=True) for r in rows]
