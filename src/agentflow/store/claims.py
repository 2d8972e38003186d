"""The claim: a worker takes due runs in one statement, runs whose lease expired first.

A run whose worker was lost is rescued here (or fails ``worker_lost`` past its rescue limits),
and one whose cancel was requested is canceled; every run taken gets a new ``fencing_token``
and a lease, all by the database clock.
"""

from __future__ import annotations

import functools
from uuid import UUID

import asyncpg

from agentflow.core.frozen import frozen
from agentflow.core.records import RunRecord

_CLAIM = """
WITH lapsed AS (
    -- Runs whose worker was lost come first: they have waited longest.
    SELECT ctid AS tid, true AS lapsed, coalesce(began_token = fencing_token, false) AS began,
           cancel_requested, rescues, unstarted_rescues, true AS was_running
    FROM runs
    WHERE due_at <= now() AND lease_owner IS NOT NULL
    ORDER BY due_at
    LIMIT $BUCKET
    FOR UPDATE SKIP LOCKED
), ready AS (
    -- was_running: handed back in progress (released), not waiting or new.
    SELECT ctid AS tid, false AS lapsed, false AS began, cancel_requested, rescues, unstarted_rescues,
           status = 'in_progress' AS was_running
    FROM runs
    WHERE due_at <= now() AND lease_owner IS NULL
    ORDER BY due_at
    LIMIT $BUCKET
    FOR UPDATE SKIP LOCKED
), picked AS (
    (SELECT * FROM lapsed LIMIT $2)
    UNION ALL
    -- Read lazily: only as many ready runs are locked as there are slots left.
    (SELECT * FROM ready LIMIT greatest($2 - (SELECT count(*) FROM lapsed), 0))
), due AS (
    SELECT tid, lapsed, began, was_running,
           CASE WHEN cancel_requested THEN 'canceled'
                WHEN lapsed AND began AND rescues >= $4 THEN 'failed'
                WHEN lapsed AND NOT began AND unstarted_rescues >= $5 THEN 'failed'
                ELSE 'in_progress' END AS verdict
    FROM picked
)
UPDATE runs r SET
    status = due.verdict,
    status_reason = CASE due.verdict WHEN 'failed' THEN 'worker_lost'
                                     WHEN 'canceled' THEN 'canceled_by_request' END,
    error = CASE WHEN due.verdict <> 'failed' THEN r.error
                 WHEN due.began THEN jsonb_build_object(
                'code', 'worker_lost',
                'message', format('the worker running step %s was lost %s times in a row while the'
                                  ' step ran', $RUNNING_STEP, r.rescues + 1),
                'details', jsonb_build_object('while_step_ran', r.rescues + 1,
                                              'before_step_began', r.unstarted_rescues),
                'solution', 'Find why workers die on this step (logs, memory), then retry the run.')
                 ELSE jsonb_build_object(
                'code', 'worker_lost',
                'message', format('workers that claimed the run were lost %s times before step %s'
                                  ' began', r.unstarted_rescues + 1, $RUNNING_STEP),
                'details', jsonb_build_object('while_step_ran', r.rescues,
                                              'before_step_began', r.unstarted_rescues + 1),
                'solution', 'Find why workers die while loading this run (logs, memory: its'
                            ' step outputs and inbox are loaded first), then retry the run.') END,
    rescues = r.rescues + (due.lapsed AND due.began)::int,
    unstarted_rescues = r.unstarted_rescues + (due.lapsed AND NOT due.began)::int,
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
RETURNING r.*, due.lapsed AS rescued, due.was_running
"""
# The step a lost worker ran: past the steps it wrote ahead of the run's row, if any
# (store.steps_ahead, whose stretches are at most 64 long). Only a run the claim fails reads it.
_RUNNING_STEP = """(SELECT coalesce(max(s.seq) + 1, r.step_seq) FROM run_steps s
                      WHERE s.workspace_id = r.workspace_id AND s.run_id = r.id
                        AND s.seq >= r.step_seq AND s.seq < r.step_seq + 64 AND s.status = 'completed')"""
_CLAIM = _CLAIM.replace("$RUNNING_STEP", _RUNNING_STEP)
# The claim that also tells what it ended: run.failed (worker_lost) to the workspaces in $6,
# run.canceled to those in $7, with the change, unless a lifecycle event started the run (the
# same events and message ids a checkpoint or a cancel publishes).
_NOT_BY_LIFECYCLE = """coalesce(c.trigger->'event'->>'topic', '') NOT IN
          ('run.started', 'run.completed', 'run.failed', 'run.canceled', 'step.failed', 'request.created')"""
_CLAIM_TELLING = _CLAIM.replace("\nUPDATE runs r SET", "\n, claimed AS (\nUPDATE runs r SET", 1).replace(
    "RETURNING r.*, due.lapsed AS rescued, due.was_running",
    f"""RETURNING r.*, due.lapsed AS rescued, due.was_running
), told AS (
    INSERT INTO events (workspace_id, topic, message_id, data, account_id, published_at)
    SELECT c.workspace_id, 'run.failed', c.id::text || ':' || c.step_seq,
           jsonb_build_object('run_id', c.id, 'workflow_id', c.workflow_id, 'version', c.workflow_version,
                              'account_id', c.account_id, 'parent_run_id', c.parent_run_id,
                              'reason', c.status_reason, 'error', c.error),
           c.account_id, now()
    FROM claimed c WHERE c.status = 'failed' AND c.workspace_id = ANY($6::uuid[]) AND {_NOT_BY_LIFECYCLE}
    UNION ALL
    SELECT c.workspace_id, 'run.canceled', c.id::text,
           jsonb_build_object('run_id', c.id, 'workflow_id', c.workflow_id, 'version', c.workflow_version,
                              'account_id', c.account_id, 'parent_run_id', c.parent_run_id,
                              'reason', c.status_reason),
           c.account_id, now()
    FROM claimed c WHERE c.status = 'canceled' AND c.workspace_id = ANY($7::uuid[]) AND {_NOT_BY_LIFECYCLE}
    ON CONFLICT (workspace_id, topic, message_id) DO NOTHING
)
SELECT * FROM claimed""",
)


BEGIN = """UPDATE runs SET began_token = {token} WHERE workspace_id = $1 AND id = $2
      AND fencing_token = {token} AND lease_owner = {owner} AND (status = 'in_progress') IS TRUE
    RETURNING id"""
"""The holder's begin (``runs.begin``), whose mark a rescue reads (``began`` above), with its
token and owner as the parameters named by ``token`` and ``owner`` (the run's workspace and id
are $1 and $2). IS TRUE: found by its key, not through runs_by_status (see
checkpoint_sql.CHECKPOINT)."""


# Workers with code steps off leave runs whose version has run_code nodes to those that run
# code (migration 0032): the claim skips them, and so does the look for the next due run.
NO_CODE = """ AND NOT EXISTS (SELECT 1 FROM workflow_versions v WHERE v.workspace_id = runs.workspace_id
        AND v.workflow_id = runs.workflow_id AND v.version = runs.workflow_version AND v.needs_code)"""


def _without_code(statement: str) -> str:
    """``statement`` (a claim) taking no run that needs a worker with code steps on."""
    for line in (
        "WHERE due_at <= now() AND lease_owner IS NOT NULL",
        "WHERE due_at <= now() AND lease_owner IS NULL",
    ):
        assert statement.count(line) == 1, line
        statement = statement.replace(line, line + NO_CODE)
    return statement


_CLAIM_NO_CODE = _without_code(_CLAIM)
_CLAIM_TELLING_NO_CODE = _without_code(_CLAIM_TELLING)


def _bucket(limit: int) -> int:
    """The least power of two at least ``limit``: the claim's literal row limit."""
    return 1 << max(limit - 1, 0).bit_length()


@functools.cache
def _claim_for(bucket: int, *, telling: bool, code: bool) -> str:
    """The claim whose scans stop at ``bucket`` rows, a literal: its plan then depends on no
    parameter, and PostgreSQL keeps one (a generic plan) per connection after five custom ones.
    Planning this statement costs about 0.5-0.7 ms, four to six times its execution on a
    quiet table; with ``LIMIT $2`` the plan without the value looked costlier (a tenth of the
    table per claim) and PostgreSQL planned every call (benchmarks/README.md). ``$2`` still
    takes the exact number of runs wanted."""
    statement = (
        (_CLAIM_TELLING if telling else _CLAIM)
        if code
        else (_CLAIM_TELLING_NO_CODE if telling else _CLAIM_NO_CODE)
    )
    return statement.replace("$BUCKET", str(bucket))


@frozen
class Claimed:
    """A run a worker now holds (``run.status == in_progress``), or one the claim ended."""

    run: RunRecord
    rescued: bool
    inbox_seq: int = 0  # deliveries the run has received (its inbox needs loading when > 0)
    # In progress before the claim (its worker lost, or it was handed back): only such a run's
    # row may lag steps written ahead of it (store.steps_ahead); a waiting or new one's cannot.
    was_running: bool = False
    # Its rescue counts are not zero: its next completed step resets them (a full checkpoint).
    counts_rescues: bool = False


async def claim(
    pool: asyncpg.Pool,
    owner: str,
    limit: int,
    lease_ttl: float,
    max_rescues: int,
    max_unstarted_rescues: int | None = None,
    *,
    tell_failed: list[UUID] | None = None,
    tell_canceled: list[UUID] | None = None,
    code: bool = True,
) -> list[Claimed]:
    """Claim up to ``limit`` due runs in one statement, runs whose lease expired first.

    A run whose lease expired is rescued. The rescue is counted against ``max_rescues``
    when the lost worker had begun the run's step (see ``begin``), else against
    ``max_unstarted_rescues`` (default: ``3 * max_rescues + 1``); a run past either fails
    with ``worker_lost`` instead, its error saying which. A run whose cancel was requested
    is canceled. Both come back with their terminal status, and publish ``run.failed`` /
    ``run.canceled`` with the change when their workspace is in ``tell_failed`` /
    ``tell_canceled`` (workspaces with a workflow that listens). ``code=False`` (a worker with
    code steps off) leaves the runs of versions with ``run_code`` nodes to other workers.
    """
    unstarted = 3 * max_rescues + 1 if max_unstarted_rescues is None else max_unstarted_rescues
    args: tuple[object, ...] = (owner, limit, lease_ttl, max_rescues, unstarted)
    bucket = _bucket(limit)
    if tell_failed or tell_canceled:
        statement = _claim_for(bucket, telling=True, code=code)
        rows = await pool.fetch(statement, *args, tell_failed or [], tell_canceled or [])
    else:
        rows = await pool.fetch(_claim_for(bucket, telling=False, code=code), *args)
    return [
        Claimed(
            RunRecord.from_row(r),
            r["rescued"],
            r["inbox_seq"],
            r["was_running"],
            r["rescues"] > 0 or r["unstarted_rescues"] > 0,
        )
        for r in rows
    ]
