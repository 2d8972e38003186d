"""Reruns from a chosen step (``core.reruns``): where the old run stood when the step began,
and the new run with the steps completed by then copied into it, in one statement."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.frozen import frozen
from agentflow.core.records import RunRecord
from agentflow.store.database import WAKE_CHANNEL


@frozen
class RerunBase:
    """Where a run stood when one of its steps began.

    Attributes:
        began: when the step's first attempt began (None: the run has no such step).
        seq: the step whose checkpoint was the last to commit before (None: none had).
        state: the run's state after that checkpoint (None also for steps recorded before
            states were kept).
        copied: the completed steps by then, by number.
    """

    began: datetime | None
    seq: int | None
    state: dict[str, Any] | None
    copied: list[int]


_BASE = """
WITH chosen AS (
    SELECT min(started_at) AS began FROM run_steps WHERE workspace_id = $1 AND run_id = $2 AND seq = $3
), done AS (
    SELECT s.seq, s.state, s.finished_at FROM run_steps s, chosen c
    WHERE s.workspace_id = $1 AND s.run_id = $2 AND s.status = 'completed' AND s.finished_at <= c.began
      AND s.seq <> $3
)
SELECT (SELECT began FROM chosen) AS began,
       (SELECT seq FROM done ORDER BY finished_at DESC, seq DESC LIMIT 1) AS seq,
       (SELECT state FROM done ORDER BY finished_at DESC, seq DESC LIMIT 1) AS state,
       (SELECT coalesce(array_agg(seq ORDER BY seq), '{}') FROM done) AS copied
"""


async def base(pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID, seq: int) -> RerunBase:
    """Where run ``run_id`` stood when its step ``seq`` began."""
    row = await pool.fetchrow(_BASE, workspace_id, run_id, seq)
    assert row is not None
    return RerunBase(row["began"], row["seq"], row["state"], list(row["copied"]))


_CREATE = f"""
WITH new AS (
    INSERT INTO runs (workspace_id, id, workflow_id, workflow_version, status, input, state, step_seq,
                      due_at, trigger, account_id, conversation, rerun_of)
    SELECT o.workspace_id, $3, o.workflow_id, $4, 'created', o.input, $5, $6, now(), o.trigger,
           o.account_id, o.conversation, jsonb_build_object('run_id', o.id, 'step', $7::int)
    FROM runs o WHERE o.workspace_id = $1 AND o.id = $2
    RETURNING *, pg_notify('{WAKE_CHANNEL}', '')
), copied AS (
    -- What the copies cost was spent by the old run: the new one's figures start at zero.
    INSERT INTO run_steps (workspace_id, run_id, seq, attempt, node_id, kind, name, status, input, output,
                           error, idempotency_key, worker, fencing_token, started_at, finished_at, state)
    SELECT s.workspace_id, new.id, s.seq, s.attempt, s.node_id, s.kind, s.name, s.status, s.input, s.output,
           s.error, new.id::text || ':' || s.seq, s.worker, 0, s.started_at, s.finished_at, s.state
    FROM run_steps s, new
    WHERE s.workspace_id = $1 AND s.run_id = $2 AND s.status = 'completed' AND s.seq = ANY($8::int[])
)
SELECT * FROM new
"""


async def create(
    pool: asyncpg.Pool,
    run: RunRecord,
    new_id: UUID,
    version: int,
    state: dict[str, Any],
    counter: int,
    from_step: int,
    copied: list[int],
) -> RunRecord:
    """Insert the rerun of ``run`` from ``from_step``, due now, with the ``copied`` steps."""
    row = await pool.fetchrow(
        _CREATE, run.workspace_id, run.id, new_id, version, state, counter, from_step, copied
    )
    assert row is not None  # the old run exists: it was just read
    return RunRecord.from_row(row)
