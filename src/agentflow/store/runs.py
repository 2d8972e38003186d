"""Named queries for runs: start, claim, checkpoint, heartbeat, release, cancel, retry.

Every write a worker makes is fenced: it names the ``fencing_token`` it was given at
claim time, and zero rows updated means the lease was lost and the write is discarded.
All lease and timer arithmetic uses the database clock (``now()``).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.records import RunRecord
from agentflow.store.database import WAKE_CHANNEL, Connection

_START = f"""
WITH ins AS (
    INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state,
                      enrollment_key, parent_run_id, due_at)
    VALUES ($1, $2, $3, $4, 'created', $5, $6, $7, $8, now())
    RETURNING *
)
SELECT ins.*, pg_notify('{WAKE_CHANNEL}', '') FROM ins
"""


async def start(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    run_id: UUID,
    workflow_id: UUID,
    version: int,
    payload: Any,
    state: dict[str, Any],
    enrollment_key: str | None = None,
    parent_run_id: UUID | None = None,
) -> RunRecord:
    """Insert a ready run and wake the workers (one statement, one commit)."""
    row = await pool.fetchrow(
        _START, workspace_id, run_id, workflow_id, version, payload, state, enrollment_key,
        parent_run_id,
    )  # fmt: skip
    return RunRecord.from_row(row)


_CLAIM = """
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


@dataclass(frozen=True)
class Claimed:
    """A run a worker now holds (``run.status == in_progress``), or one the claim ended."""

    run: RunRecord
    rescued: bool
    inbox_seq: int = 0  # deliveries the run has received (its inbox needs loading when > 0)


async def claim(
    pool: asyncpg.Pool, owner: str, limit: int, lease_ttl: float, max_rescues: int
) -> list[Claimed]:
    """Claim up to ``limit`` due runs in one statement.

    Runs whose lease expired are rescued (counted); a run already rescued
    ``max_rescues`` times fails with ``worker_lost`` instead, and a run whose cancel was
    requested is canceled. Both come back with their terminal status.
    """
    rows = await pool.fetch(_CLAIM, owner, limit, lease_ttl, max_rescues)
    return [Claimed(RunRecord.from_row(r), r["rescued"], r["inbox_seq"]) for r in rows]


_CHECKPOINT = """
WITH r AS (
    UPDATE runs SET
        status = $5,
        status_reason = $6,
        state = $7,
        output = $8,
        error = $9,
        step_seq = step_seq + $10::int,
        attempt = CASE WHEN $10::int = 1 THEN 0 ELSE attempt + 1 END,
        rescues = CASE WHEN $10::int = 1 THEN 0 ELSE rescues END,
        -- Going on (in_progress): the lease and due_at stay as they are (heartbeats extend
        -- them), so the update changes no indexed column and can be HOT.
        due_at = CASE $5
            WHEN 'in_progress' THEN due_at
            -- A wait for an event ('awaiting_event', core.inbox.AWAITING_EVENT) is due at once
            -- when a delivery arrived that the step did not see ($23: the count it saw). The
            -- count is read from this row, which a delivery updates, so a delivery that holds
            -- the row now is waited for and counted: no wake-up is lost.
            WHEN 'waiting' THEN CASE WHEN $6::text = 'awaiting_event' AND inbox_seq > $23::bigint
                                     THEN now()
                                     WHEN $12::timestamptz IS NULL
                                     THEN now() + make_interval(secs => $11)
                                     ELSE greatest(now(), $12::timestamptz) END END,
        lease_owner = CASE WHEN $5 = 'in_progress' THEN lease_owner END,
        lease_expires_at = CASE WHEN $5 = 'in_progress' THEN lease_expires_at END,
        completed_at = CASE WHEN $5 IN ('completed', 'failed') THEN now() END,
        updated_at = now()
    WHERE workspace_id = $1 AND id = $2 AND fencing_token = $3 AND lease_owner = $4
      AND status = 'in_progress' AND step_seq = $13
    RETURNING workspace_id, id, status, due_at, cancel_requested, inbox_seq,
              extract(epoch FROM due_at - now())::float8 AS due_in
), s AS (
    INSERT INTO run_steps (workspace_id, run_id, seq, attempt, node_id, kind, name, status,
                           input, output, error, idempotency_key, worker, fencing_token,
                           started_at, finished_at)
    SELECT r.workspace_id, r.id, $13, $14, $15, $16, $17, $18, $19, $20, $21,
           r.id::text || ':' || $13, $4, $3,
           clock_timestamp() - make_interval(secs => $22), clock_timestamp()
    FROM r
)

SELECT * FROM r
"""
# Consuming the inbox rows the step saw ($ROWS), exactly once with the step (fenced by r).
_CONSUME = """, c AS (
    UPDATE run_inbox i SET consumed_at = now(), consumed_seq = $13
    FROM r WHERE i.workspace_id = r.workspace_id AND i.run_id = r.id
      AND i.id = ANY($ROWS::bigint[]) AND i.consumed_at IS NULL
)"""
# Inserting the tasks the step asked for ($TASKS), exactly once with the step.
_TASKS = """, t AS (
    INSERT INTO tasks (workspace_id, id, run_id, origin_key, title, description, assignee,
                       due_at, priority, system_generated, account_id, metadata)
    SELECT r.workspace_id, gen_random_uuid(), r.id, r.id::text || ':' || $13 || ':' || x.n,
           x.doc->>'title', x.doc->>'description', x.doc->>'assignee',
           (x.doc->>'due_at')::timestamptz, x.doc->>'priority', true, x.doc->>'account_id',
           coalesce(x.doc->'metadata', '{}')
    FROM r, jsonb_array_elements($TASKS::jsonb) WITH ORDINALITY AS x(doc, n)
)"""


@functools.cache
def _checkpoint_statement(consume: bool, tasks: bool) -> str:
    """The checkpoint with only the writes this step needs (the common step needs neither)."""
    extra, number = "", 24
    if consume:
        extra, number = extra + _CONSUME.replace("$ROWS", f"${number}"), number + 1
    if tasks:
        extra += _TASKS.replace("$TASKS", f"${number}")
    return _CHECKPOINT.replace("\nSELECT * FROM r", extra + "\nSELECT * FROM r")


@dataclass(frozen=True)
class StepWrite:
    """The audit row of one step attempt."""

    seq: int
    attempt: int
    node_id: str | None
    kind: str
    name: str | None
    status: str
    input: Any
    output: Any
    error: dict[str, Any] | None
    duration: float


@dataclass(frozen=True)
class RunWrite:
    """How the run moves at a checkpoint.

    ``inbox_seen`` is the run's delivery count as of the inbox the step saw (a wait for an event
    is due at once when the row's count is higher); ``consumed`` lists the inbox rows the step
    used, consumed by this checkpoint.
    """

    status: str
    status_reason: str | None
    state: dict[str, Any]
    output: Any
    error: dict[str, Any] | None
    advance: bool
    wake_after: float | None = None
    wake_at: datetime | None = None
    inbox_seen: int = 0
    consumed: tuple[int, ...] = ()


@dataclass(frozen=True)
class Checkpointed:
    """A checkpoint that held: the run's new status, when due later how soon, and its delivery
    count (higher than the step saw: something arrived meanwhile)."""

    status: str
    due_in: float | None
    cancel_requested: bool
    inbox_seq: int = 0


async def checkpoint(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    run_id: UUID,
    token: int,
    owner: str,
    run: RunWrite,
    step: StepWrite,
    tasks: list[dict[str, Any]],
) -> Checkpointed | None:
    """Record a step and move the run in one statement, fenced on ``token``.

    Returns None when the lease was lost: nothing was written.
    """
    args: list[Any] = [
        workspace_id, run_id, token, owner,
        run.status, run.status_reason, run.state, run.output, run.error, int(run.advance),
        run.wake_after or 0.0, run.wake_at,
        step.seq, step.attempt, step.node_id, step.kind, step.name, step.status,
        step.input, step.output, step.error, step.duration, run.inbox_seen,
    ]  # fmt: skip
    if run.consumed:
        args.append(list(run.consumed))
    if tasks:
        args.append(tasks)
    row = await pool.fetchrow(_checkpoint_statement(bool(run.consumed), bool(tasks)), *args)
    if row is None:
        return None
    return Checkpointed(row["status"], row["due_in"], row["cancel_requested"], row["inbox_seq"])


_HEARTBEAT = (
    "UPDATE runs r SET lease_expires_at = now() + make_interval(secs => $5),"
    " due_at = now() + make_interval(secs => $5)"
    " FROM unnest($1::uuid[], $2::uuid[], $3::bigint[]) AS h(ws, id, token)"
    " WHERE r.workspace_id = h.ws AND r.id = h.id AND r.fencing_token = h.token"
    " AND r.lease_owner = $4 AND r.status = 'in_progress' RETURNING r.id"
)


async def heartbeat(
    pool: asyncpg.Pool, owner: str, held: list[tuple[UUID, UUID, int]], lease_ttl: float
) -> set[UUID]:
    """Extend the leases this worker still holds; return the run ids still held."""
    if not held:
        return set()
    args = ([h[0] for h in held], [h[1] for h in held], [h[2] for h in held], owner, lease_ttl)
    for _ in range(2):
        # A transaction delivering to several of these runs (a delivery updates its run's row)
        # may lock them in another order; PostgreSQL breaks the cycle by failing one side. When
        # that is this statement, trying again waits for the delivery to commit, then succeeds.
        with contextlib.suppress(asyncpg.DeadlockDetectedError):
            return {row["id"] for row in await pool.fetch(_HEARTBEAT, *args)}
    return {row["id"] for row in await pool.fetch(_HEARTBEAT, *args)}


async def release(pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID, token: int, owner: str) -> bool:
    """Give a held run back, due now, for another worker (graceful shutdown)."""
    row = await pool.fetchrow(
        "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, due_at = now(),"
        " updated_at = now() WHERE workspace_id = $1 AND id = $2 AND fencing_token = $3"
        " AND lease_owner = $4 AND status = 'in_progress'"
        f" RETURNING pg_notify('{WAKE_CHANNEL}', '')",
        workspace_id, run_id, token, owner,
    )  # fmt: skip
    return row is not None


async def finish_cancel(pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID, token: int, owner: str) -> bool:
    """Cancel a held run at a step boundary after its cancel was requested."""
    row = await pool.fetchrow(
        "UPDATE runs SET status = 'canceled', status_reason = 'canceled_by_request',"
        " due_at = NULL, lease_owner = NULL, lease_expires_at = NULL, canceled_at = now(),"
        " updated_at = now() WHERE workspace_id = $1 AND id = $2 AND fencing_token = $3"
        " AND lease_owner = $4 AND status IN ('in_progress', 'waiting') RETURNING id",
        workspace_id, run_id, token, owner,
    )  # fmt: skip
    return row is not None


_CANCEL = """
WITH cur AS (
    SELECT workspace_id, id,
           (status <> 'in_progress' OR lease_owner IS NULL OR lease_expires_at <= now()) AS now_
    FROM runs
    WHERE workspace_id = $1 AND id = $2
      AND status IN ('created', 'in_progress', 'waiting', 'suspended')
    FOR UPDATE
)
UPDATE runs r SET
    cancel_requested = true,
    enrollment_key = CASE WHEN $4 THEN NULL ELSE r.enrollment_key END,
    status = CASE WHEN cur.now_ THEN 'canceled' ELSE r.status END,
    status_reason = CASE WHEN cur.now_ THEN $3 ELSE r.status_reason END,
    due_at = CASE WHEN cur.now_ THEN NULL ELSE r.due_at END,
    lease_owner = CASE WHEN cur.now_ THEN NULL ELSE r.lease_owner END,
    lease_expires_at = CASE WHEN cur.now_ THEN NULL ELSE r.lease_expires_at END,
    fencing_token = r.fencing_token + cur.now_::int,
    canceled_at = CASE WHEN cur.now_ THEN now() END,
    updated_at = now()
FROM cur WHERE r.workspace_id = cur.workspace_id AND r.id = cur.id
RETURNING r.*
"""


async def cancel(
    conn: asyncpg.Pool | Connection,
    workspace_id: UUID,
    run_id: UUID,
    reason: str,
    *,
    release_key: bool = False,
) -> RunRecord | None:
    """Cancel a run: at once unless a live worker holds it (then at its next checkpoint).

    With ``release_key`` the run gives up its enrollment key now, even if it stops later, so
    a new run for the key can start at once (a trigger's ``restart`` mode).

    Returns None when the run does not exist or has already ended.
    """
    row = await conn.fetchrow(_CANCEL, workspace_id, run_id, reason, release_key)
    return RunRecord.from_row(row) if row else None


async def retry(pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID) -> RunRecord | None:
    """Make a failed run ready again from its failed step, with a fresh attempt budget.

    Raises:
        asyncpg.UniqueViolationError: another run now holds the run's enrollment key.
    """
    row = await pool.fetchrow(
        "UPDATE runs SET status = 'in_progress', status_reason = 'retried', attempt = 0,"
        " rescues = 0, error = NULL, completed_at = NULL, cancel_requested = false,"
        " due_at = now(), lease_owner = NULL, lease_expires_at = NULL,"
        " fencing_token = fencing_token + 1, updated_at = now()"
        " WHERE workspace_id = $1 AND id = $2 AND status = 'failed'"
        f" RETURNING *, pg_notify('{WAKE_CHANNEL}', '')",
        workspace_id, run_id,
    )  # fmt: skip
    return RunRecord.from_row(row) if row else None


async def seconds_to_next_due(pool: asyncpg.Pool) -> float | None:
    """Seconds (database clock) until the earliest due run; negative if one is overdue."""
    value = await pool.fetchval(
        "SELECT extract(epoch FROM min(due_at) - clock_timestamp())::float8 FROM runs"
        " WHERE due_at IS NOT NULL"
    )
    return None if value is None else float(value)
