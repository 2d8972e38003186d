"""Named queries for runs: begin, checkpoint, heartbeat, release, cancel, retry (the claim is
``store.claims``'s, the checkpoint ``store.checkpoints``'s; both are re-exported here).

Every write a worker makes is fenced: it names the ``fencing_token`` it was given at
claim time, and zero rows updated means the lease was lost and the write is discarded.
All lease and timer arithmetic uses the database clock (``now()``).
"""

from __future__ import annotations

import contextlib
from uuid import UUID

import asyncpg

from agentflow.core.records import RunRecord
from agentflow.store.checkpoints import Checkpointed, Effects, RunWrite, StepWrite, checkpoint
from agentflow.store.claims import BEGIN, NO_CODE, Claimed, claim
from agentflow.store.commit_groups import RowFetcher
from agentflow.store.database import WAKE_CHANNEL, Connection

__all__ = [
    "Checkpointed", "Claimed", "Effects", "RunWrite", "StepWrite", "begin", "cancel",
    "checkpoint", "claim", "finish_cancel", "heartbeat", "release", "retry", "seconds_to_next_due",
]  # fmt: skip


_BEGIN = BEGIN.format(token="$3", owner="$4")


async def begin(pool: RowFetcher, workspace_id: UUID, run_id: UUID, token: int, owner: str) -> bool:
    """Record that the holder of ``token`` begins the run's step (after loading what it needs).

    A worker lost after this costs the run a rescue; one lost before it does not (see
    ``claim``). Later steps of the same claim are marked by their checkpoint for free.

    Returns:
        False when the lease was lost (the run must not be executed).
    """
    row = await pool.fetchrow(_BEGIN, workspace_id, run_id, token, owner)
    return row is not None


# The rows are locked in the order of their ids, as a worker's group commit locks them
# (store.commit_groups): the two never deadlock. The update finds them by id, not by ctid: a
# row another transaction updated while this one waited for its lock has moved since the
# statement's snapshot, and only its id still finds it.
_HEARTBEAT = """
WITH held AS (
    SELECT r.workspace_id, r.id FROM runs r
    JOIN unnest($1::uuid[], $2::uuid[], $3::bigint[]) AS h(ws, id, token)
      ON r.workspace_id = h.ws AND r.id = h.id AND r.fencing_token = h.token
    WHERE r.lease_owner = $4 AND r.status = 'in_progress'
    ORDER BY r.id
    FOR UPDATE OF r
)
UPDATE runs r SET lease_expires_at = now() + make_interval(secs => $5),
                  due_at = now() + make_interval(secs => $5)
FROM held WHERE r.workspace_id = held.workspace_id AND r.id = held.id
RETURNING r.id
"""


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
    # IS TRUE: found by its key, not through runs_by_status (see checkpoint_sql.CHECKPOINT).
    row = await pool.fetchrow(
        "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, due_at = now(),"
        " updated_at = now() WHERE workspace_id = $1 AND id = $2 AND fencing_token = $3"
        " AND lease_owner = $4 AND (status = 'in_progress') IS TRUE"
        f" RETURNING pg_notify('{WAKE_CHANNEL}', '')",
        workspace_id, run_id, token, owner,
    )  # fmt: skip
    return row is not None


async def finish_cancel(
    pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID, token: int, owner: str, *, tell: bool = False
) -> bool:
    """Cancel a run at the step boundary just checkpointed under ``token``, after its cancel
    was requested.

    The step may have left the run waiting or suspended, which gives up the lease (no lease
    owner); the unchanged fencing token still proves nobody claimed the run since. ``tell``:
    publish ``run.canceled`` with the change (``core.lifecycle``).
    """
    row = await pool.fetchrow(
        "WITH fin AS (UPDATE runs SET status = 'canceled', status_reason = 'canceled_by_request',"
        " due_at = NULL, lease_owner = NULL, lease_expires_at = NULL, canceled_at = now(),"
        " updated_at = now() WHERE workspace_id = $1 AND id = $2 AND fencing_token = $3"
        " AND (lease_owner = $4 OR lease_owner IS NULL)"
        " AND status IN ('in_progress', 'waiting', 'suspended') RETURNING *)"
        + CANCELED_EVENT.replace("$TELL", "$5")
        + " SELECT id FROM fin",
        workspace_id, run_id, token, owner, tell,
    )  # fmt: skip
    return row is not None


# run.canceled with the change ($TELL: somebody listens), unless a lifecycle event started the run.
CANCELED_EVENT = """, told AS (
    INSERT INTO events (workspace_id, topic, message_id, data, account_id, published_at)
    SELECT fin.workspace_id, 'run.canceled', fin.id::text,
           jsonb_build_object('run_id', fin.id, 'workflow_id', fin.workflow_id,
                              'version', fin.workflow_version, 'account_id', fin.account_id,
                              'parent_run_id', fin.parent_run_id, 'reason', fin.status_reason),
           fin.account_id, now()
    FROM fin WHERE $TELL::boolean AND fin.status = 'canceled'
      AND coalesce(fin.trigger->'event'->>'topic', '') NOT IN
          ('run.started', 'run.completed', 'run.failed', 'run.canceled', 'step.failed', 'request.created')
    ON CONFLICT (workspace_id, topic, message_id) DO NOTHING
)"""

_CANCEL = (
    """
WITH RECURSIVE cur AS (
    SELECT workspace_id, id,
           (status <> 'in_progress' OR lease_owner IS NULL OR lease_expires_at <= now()) AS now_
    FROM runs
    WHERE workspace_id = $1 AND id = $2
      AND status IN ('created', 'in_progress', 'waiting', 'suspended')
    FOR UPDATE
), tree AS (
    -- The run's loop items, and theirs (nested loops).
    SELECT c.workspace_id, c.id FROM runs c JOIN cur ON c.workspace_id = cur.workspace_id
      AND c.parent_run_id = cur.id AND c.parent_step IS NOT NULL
    UNION
    SELECT c.workspace_id, c.id FROM runs c JOIN tree t ON c.workspace_id = t.workspace_id
      AND c.parent_run_id = t.id AND c.parent_step IS NOT NULL
), items AS (
    -- They go with it: at once, or at their step's end when a worker holds one.
    UPDATE runs c SET
        cancel_requested = true,
        status = CASE WHEN c.lease_owner IS NULL OR c.lease_expires_at <= now()
                      THEN 'canceled' ELSE c.status END,
        status_reason = CASE WHEN c.lease_owner IS NULL OR c.lease_expires_at <= now()
                             THEN $3 ELSE c.status_reason END,
        due_at = CASE WHEN c.lease_owner IS NULL OR c.lease_expires_at <= now()
                      THEN NULL ELSE c.due_at END,
        lease_owner = CASE WHEN c.lease_owner IS NULL OR c.lease_expires_at <= now()
                           THEN NULL ELSE c.lease_owner END,
        lease_expires_at = CASE WHEN c.lease_owner IS NULL OR c.lease_expires_at <= now()
                                THEN NULL ELSE c.lease_expires_at END,
        canceled_at = CASE WHEN c.lease_owner IS NULL OR c.lease_expires_at <= now() THEN now() END,
        updated_at = now()
    FROM tree WHERE c.workspace_id = tree.workspace_id AND c.id = tree.id AND c.active
), fin AS (
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
)"""
    + CANCELED_EVENT.replace("$TELL", "$5")
    + """
SELECT * FROM fin
"""
)


async def cancel(
    conn: asyncpg.Pool | Connection,
    workspace_id: UUID,
    run_id: UUID,
    reason: str,
    *,
    release_key: bool = False,
    tell: bool = False,
) -> RunRecord | None:
    """Cancel a run: at once unless a live worker holds it (then at its next checkpoint);
    ``tell``: publish ``run.canceled`` with the change when it is canceled now.

    With ``release_key`` the run gives up its enrollment key now, even if it stops later, so
    a new run for the key can start at once (a trigger's ``restart`` mode).

    Returns None when the run does not exist or has already ended.
    """
    row = await conn.fetchrow(_CANCEL, workspace_id, run_id, reason, release_key, tell)
    return RunRecord.from_row(row) if row else None


_RETRY = f"""
WITH RECURSIVE p AS (
    UPDATE runs SET status = 'in_progress', status_reason = 'retried', attempt = 0,
        rescues = 0, unstarted_rescues = 0, error = NULL, completed_at = NULL, cancel_requested = false,
        due_at = now(), lease_owner = NULL, lease_expires_at = NULL,
        fencing_token = fencing_token + 1, updated_at = now()
    WHERE workspace_id = $1 AND id = $2 AND status = 'failed'
    RETURNING *, pg_notify('{WAKE_CHANNEL}', '')
), tree AS (
    -- The items that did not complete of the loops the run still waits for, and theirs.
    SELECT c.workspace_id, c.id, c.item_index, (l.doc->>'released')::int AS released
    FROM p CROSS JOIN LATERAL jsonb_array_elements(coalesce(p.state->'loops', '[]')) AS l(doc)
    JOIN runs c ON c.workspace_id = p.workspace_id AND c.parent_run_id = p.id
               AND c.parent_step = (l.doc->>'seq')::int
    WHERE c.status IN ('failed', 'canceled')
    UNION ALL
    SELECT c.workspace_id, c.id, c.item_index, (l.doc->>'released')::int
    FROM tree t JOIN runs k ON k.workspace_id = t.workspace_id AND k.id = t.id
    CROSS JOIN LATERAL jsonb_array_elements(coalesce(k.state->'loops', '[]')) AS l(doc)
    JOIN runs c ON c.workspace_id = k.workspace_id AND c.parent_run_id = k.id
               AND c.parent_step = (l.doc->>'seq')::int
    WHERE c.status IN ('failed', 'canceled')
), items AS (
    -- Each goes on from where it stopped, as a retried run; those its loop had not let run
    -- yet wait for it again.
    UPDATE runs c SET status = CASE WHEN c.started_at IS NULL THEN 'created' ELSE 'in_progress' END,
        status_reason = 'retried', attempt = 0, rescues = 0, unstarted_rescues = 0, error = NULL,
        completed_at = NULL, canceled_at = NULL, cancel_requested = false,
        due_at = CASE WHEN tree.item_index < tree.released THEN now() ELSE 'infinity' END,
        lease_owner = NULL, lease_expires_at = NULL, fencing_token = c.fencing_token + 1, updated_at = now()
    FROM tree WHERE c.workspace_id = tree.workspace_id AND c.id = tree.id
)
SELECT * FROM p
"""


async def retry(pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID) -> RunRecord | None:
    """Make a failed run ready again from its failed step, with a fresh attempt budget; the
    items of its loops that did not complete (and of loops nested in them) go on again too,
    and completed items are kept.

    Raises:
        asyncpg.UniqueViolationError: another run now holds the run's enrollment key.
    """
    row = await pool.fetchrow(_RETRY, workspace_id, run_id)
    return RunRecord.from_row(row) if row else None


async def seconds_to_next_due(pool: asyncpg.Pool, *, code: bool = True) -> float | None:
    """Seconds (database clock) until the earliest due run; negative if one is overdue.
    Loop items not let run yet (due 'infinity') are never due; ``code=False``: nor are runs
    that need a worker with code steps on."""
    value = await pool.fetchval(_NEXT_DUE if code else _NEXT_DUE_NO_CODE)
    return None if value is None else float(value)


def _next_due(code: str) -> str:
    """The earliest due_at of ready runs and of held ones (``code``: a further condition),
    each through its own index (runs_ready, runs_lapsed)."""
    earliest = (
        "(SELECT due_at FROM runs WHERE due_at < 'infinity' AND lease_owner IS {held}{code}"
        " ORDER BY due_at LIMIT 1)"
    )
    ready, held = earliest.format(held="NULL", code=code), earliest.format(held="NOT NULL", code=code)
    return f"SELECT extract(epoch FROM least({ready}, {held}) - clock_timestamp())::float8"


_NEXT_DUE, _NEXT_DUE_NO_CODE = _next_due(""), _next_due(NO_CODE)
