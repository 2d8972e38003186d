"""Named reads for agent runs: their history, the tasks they created, the account, today's spend.

Each is one short statement outside any transaction; a decision reads them, then asks the
model with no connection held.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.agent_context import HistoryStep
from agentflow.core.frozen import frozen
from agentflow.store import json_codec
from agentflow.store.claims import BEGIN
from agentflow.store.commit_groups import RowFetcher


async def history(pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID) -> list[HistoryStep]:
    """The run's completed agent steps, oldest first (their values canonical)."""
    rows = await pool.fetch(
        "SELECT seq, kind, name, input, output FROM run_steps"
        " WHERE workspace_id = $1 AND run_id = $2 AND status = 'completed' AND kind LIKE 'agent.%'"
        " ORDER BY seq",
        workspace_id, run_id,
    )  # fmt: skip
    return [_history_step(r["seq"], r["kind"], r["name"], r["input"], r["output"]) for r in rows]


def _history_step(seq: int, kind: str, name: str | None, input: Any, output: Any) -> HistoryStep:
    """A stored step with its values canonical (keys sorted), as a worker keeps the steps it
    wrote: a decision shows the model the same whichever it was built from."""
    return HistoryStep(seq, kind, name, json_codec.canonical(input), json_codec.canonical(output))


async def account(pool: asyncpg.Pool, workspace_id: UUID, account_id: str) -> dict[str, Any] | None:
    """What is known about an account, or None."""
    row = await pool.fetchrow(
        "SELECT id, name, owner, attributes FROM accounts WHERE workspace_id = $1 AND id = $2",
        workspace_id, account_id,
    )  # fmt: skip
    return dict(row) if row else None


async def workspace_spend(
    pool: asyncpg.Pool, workspace_id: UUID
) -> tuple[float, int, float | None, int | None]:
    """Today's (UTC) model spend and tokens, and the workspace's own daily limits (None: default)."""
    row = await pool.fetchrow(
        "SELECT coalesce(u.usd_cost, 0)::float8 AS usd,"
        " coalesce(u.input_tokens + u.output_tokens, 0) AS tokens,"
        " b.daily_usd::float8 AS daily_usd, b.daily_tokens"
        " FROM (SELECT $1::uuid AS ws) w"
        " LEFT JOIN workspace_usage u ON u.workspace_id = w.ws AND u.day = (now() AT TIME ZONE 'UTC')::date"
        " LEFT JOIN workspace_budgets b ON b.workspace_id = w.ws",
        workspace_id,
    )
    assert row is not None
    return float(row["usd"]), int(row["tokens"]), row["daily_usd"], row["daily_tokens"]


@frozen
class DecisionReads:
    """What a decision reads before it asks the model, in one round trip.

    Attributes:
        spend: the workspace's spend and tokens today and its own daily limits (as
            ``workspace_spend``).
        account: the run's account (None without one, or when it is unknown).
        history: the run's completed agent steps, oldest first (as ``history``).
        tasks: the tasks the run created, as they are now (full content, for the model).
    """

    spend: tuple[float, int, float | None, int | None]
    account: dict[str, Any] | None
    history: list[HistoryStep]
    tasks: list[dict[str, Any]]


TASK_JSON = """jsonb_build_object(
    'id', {t}.id, 'title', {t}.title, 'description', {t}.description, 'assignee', {t}.assignee,
    'due_at', {t}.due_at, 'priority', {t}.priority, 'status', {t}.status,
    'account_id', {t}.account_id, 'revision', {t}.revision, 'expires_at', {t}.expires_at,
    'completed_at', {t}.completed_at)"""
"""A task as a decision sees it (``{t}``: the task row's alias); a checkpoint that creates
tasks returns them so (``store.checkpoint_sql.TASKS``)."""
_HISTORY = """
       (SELECT coalesce(jsonb_agg(jsonb_build_array(s.seq, s.kind, s.name, s.input, s.output) ORDER BY s.seq),
                        '[]')
        FROM run_steps s WHERE s.workspace_id = $1 AND s.run_id = $2 AND s.status = 'completed'
          AND s.kind LIKE 'agent.%') AS history,"""
_DECISION_READS = """
SELECT {begun}coalesce(u.usd_cost, 0)::float8 AS usd,
       coalesce(u.input_tokens + u.output_tokens, 0) AS tokens,
       b.daily_usd::float8 AS daily_usd, b.daily_tokens,
       (SELECT jsonb_build_object('id', a.id, 'name', a.name, 'owner', a.owner, 'attributes', a.attributes)
        FROM accounts a WHERE a.workspace_id = $1 AND a.id = $3) AS account,
{history}
       (SELECT coalesce(jsonb_agg({task} ORDER BY t.created_at, t.id), '[]')
        FROM tasks t WHERE t.workspace_id = $1 AND t.run_id = $2) AS tasks
FROM {source}(SELECT $1::uuid AS ws) w
LEFT JOIN workspace_usage u ON u.workspace_id = w.ws AND u.day = (now() AT TIME ZONE 'UTC')::date
LEFT JOIN workspace_budgets b ON b.workspace_id = w.ws
"""
_WITH_HISTORY = _DECISION_READS.format(begun="", source="", history=_HISTORY, task=TASK_JSON.format(t="t"))
_WITHOUT_HISTORY = _DECISION_READS.format(begun="", source="", history="", task=TASK_JSON.format(t="t"))
# runs.begin's update ($4: the token, $5: the owner), then the reads: no row when the lease
# was lost.
_BEGUN_READS = f"""
WITH begun AS (
    {BEGIN.format(token="$4", owner="$5")}
)""" + _DECISION_READS.format(
    begun="begun.id, ", source="begun CROSS JOIN ", history=_HISTORY, task=TASK_JSON.format(t="t")
)


async def decision_reads(
    pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID, account_id: str | None, *, history: bool = True
) -> DecisionReads:
    """The workspace's spend, the account, the run's history and its tasks, in one statement
    (each was a round trip of its own: a decision's reads were most of its cost).

    ``history=False``: the caller knows the history (the worker wrote it); it is not read
    (``DecisionReads.history`` is empty), so the read does not grow with the run.
    """
    statement = _WITH_HISTORY if history else _WITHOUT_HISTORY
    row = await pool.fetchrow(statement, workspace_id, run_id, account_id)
    assert row is not None
    return _decision_reads(row, history)


async def begin_reading(
    pool: RowFetcher, workspace_id: UUID, run_id: UUID, token: int, owner: str, account_id: str | None
) -> DecisionReads | None:
    """Begin the run's step as ``runs.begin`` does and, in the same statement, read what its
    decision reads (``decision_reads``, with the history): one round trip where a claimed
    run's first decision made two. ``pool`` may be a ``CommitGroup``.

    Returns:
        None when the lease was lost (nothing was begun: the run must not be executed).
    """
    row = await pool.fetchrow(_BEGUN_READS, workspace_id, run_id, account_id, token, owner)
    return None if row is None else _decision_reads(row, True)


def _decision_reads(row: asyncpg.Record, history: bool) -> DecisionReads:
    steps = [_history_step(*entry) for entry in row["history"]] if history else []
    spend = (float(row["usd"]), int(row["tokens"]), row["daily_usd"], row["daily_tokens"])
    return DecisionReads(spend, row["account"], steps, list(row["tasks"]))


async def approval(pool: asyncpg.Pool, workspace_id: UUID, approval_id: UUID) -> dict[str, Any] | None:
    """An approval request with whether it has expired (database clock)."""
    row = await pool.fetchrow(
        "SELECT id, tool, arguments_hash, status, reason, decided_by, response,"
        " (status = 'pending' AND expires_at IS NOT NULL AND expires_at <= now()) AS expired,"
        " extract(epoch FROM expires_at - now())::float8 AS expires_in"
        " FROM requests WHERE workspace_id = $1 AND id = $2",
        workspace_id, approval_id,
    )  # fmt: skip
    return dict(row) if row else None


async def elapsed_seconds(pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID) -> float:
    """Seconds since the run started (database clock)."""
    value = await pool.fetchval(
        "SELECT extract(epoch FROM now() - coalesce(started_at, created_at))::float8 FROM runs"
        " WHERE workspace_id = $1 AND id = $2",
        workspace_id, run_id,
    )  # fmt: skip
    return float(value or 0.0)


async def child_end(
    pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID, child_id: UUID
) -> dict[str, Any] | None:
    """The ``status``, ``output`` and ``error`` of the child ``child_id`` of ``run_id``, or None
    while it has not ended (or does not exist yet)."""
    row = await pool.fetchrow(
        "SELECT status, output, error FROM runs WHERE workspace_id = $1 AND id = $2"
        " AND parent_run_id = $3 AND status IN ('completed', 'failed', 'canceled')",
        workspace_id, child_id, run_id,
    )  # fmt: skip
    return None if row is None else dict(row)
