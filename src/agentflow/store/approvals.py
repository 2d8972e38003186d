"""Named queries for approvals, resuming suspended runs, and workspace budgets.

A decision on an approval and the wake-up of its run commit together; a request is decided
once (``status = 'pending'`` in the update), so of two concurrent decisions one wins and the
other sees it already decided (G7).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.records import RunRecord
from agentflow.store.database import WAKE_CHANNEL, Connection

_COLUMNS = (
    "a.id, a.run_id, r.workflow_id, a.step_seq, a.tool, a.arguments, a.arguments_hash, a.status, a.reason,"
    " a.decided_by, a.created_at, a.expires_at, a.decided_at,"
    " (a.status = 'pending' AND a.expires_at IS NOT NULL AND a.expires_at <= now()) AS expired"
)


async def list_approvals(
    pool: asyncpg.Pool, workspace_id: UUID, status: str | None, run_id: UUID | None, limit: int
) -> list[dict[str, Any]]:
    """Approvals, newest first, optionally only one status or one run."""
    rows = await pool.fetch(
        f"SELECT {_COLUMNS} FROM requests a"
        " JOIN runs r ON r.workspace_id = a.workspace_id AND r.id = a.run_id"
        " WHERE a.workspace_id = $1 AND a.node_id IS NULL AND ($2::text IS NULL OR a.status = $2)"
        " AND ($3::uuid IS NULL OR a.run_id = $3) ORDER BY a.created_at DESC, a.id LIMIT $4",
        workspace_id, status, run_id, limit,
    )  # fmt: skip
    return [dict(r) for r in rows]


async def get_approval(
    pool: asyncpg.Pool | asyncpg.Connection, workspace_id: UUID, approval_id: UUID
) -> dict[str, Any] | None:
    """One approval, or None."""
    row = await pool.fetchrow(
        f"SELECT {_COLUMNS} FROM requests a"
        " JOIN runs r ON r.workspace_id = a.workspace_id AND r.id = a.run_id"
        " WHERE a.workspace_id = $1 AND a.id = $2 AND a.node_id IS NULL",
        workspace_id, approval_id,
    )  # fmt: skip
    return dict(row) if row else None


_DECIDE = f"""
WITH d AS (
    UPDATE requests SET status = $3, reason = $4, decided_by = $5, decided_at = now(), response = $7,
                        responded_via = $8
    WHERE workspace_id = $1 AND id = $2 AND status = 'pending' AND node_id IS NULL
      AND (expires_at IS NULL OR expires_at > now())
      AND ($6::text IS NULL OR arguments_hash = $6)
    RETURNING workspace_id, run_id
), w AS (
    UPDATE runs r SET due_at = now(), updated_at = now()
    FROM d WHERE r.workspace_id = d.workspace_id AND r.id = d.run_id
      AND r.status = 'waiting' AND r.status_reason = 'awaiting_approval'
    RETURNING pg_notify('{WAKE_CHANNEL}', '')
)
SELECT (SELECT count(*) FROM d) AS decided, (SELECT count(*) FROM w) AS woken
"""


async def decide(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    approval_id: UUID,
    status: str,
    reason: str | None,
    decided_by: str | None,
    expected_hash: str | None,
    edited: dict[str, Any] | None = None,
    via: str | None = None,
) -> bool:
    """Approve or reject a pending, unexpired request (and wake its run) in one statement;
    ``edited``: the arguments the approver changed the call to; ``via``: the channel.

    Returns False when nothing was decided (not found, decided, expired, or another hash).
    """
    row = await pool.fetchrow(
        _DECIDE, workspace_id, approval_id, status, reason, decided_by, expected_hash, edited, via
    )
    return row is not None and row["decided"] == 1


async def resume(
    pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID, token: int, state: dict[str, Any]
) -> RunRecord | None:
    """Make a suspended run ready again with ``state``, if it is still as read (``token``)."""
    row = await pool.fetchrow(
        "UPDATE runs SET status = 'in_progress', status_reason = 'resumed', error = NULL, state = $4,"
        " due_at = now(), lease_owner = NULL, lease_expires_at = NULL, fencing_token = fencing_token + 1,"
        " updated_at = now() WHERE workspace_id = $1 AND id = $2 AND status = 'suspended'"
        f" AND fencing_token = $3 RETURNING *, pg_notify('{WAKE_CHANNEL}', '')",
        workspace_id, run_id, token, state,
    )  # fmt: skip
    return RunRecord.from_row(row) if row else None


async def budget(pool: asyncpg.Pool, workspace_id: UUID) -> dict[str, Any]:
    """The workspace's own daily limits (None: the default) and today's (UTC) use."""
    row = await pool.fetchrow(
        "SELECT b.daily_usd::float8 AS daily_usd, b.daily_tokens, (now() AT TIME ZONE 'UTC')::date AS day,"
        " coalesce(u.usd_cost, 0)::float8 AS usd_cost, coalesce(u.input_tokens, 0) AS input_tokens,"
        " coalesce(u.output_tokens, 0) AS output_tokens,"
        " coalesce(u.cached_input_tokens, 0) AS cached_input_tokens,"
        " coalesce(u.model_calls, 0) AS model_calls"
        " FROM (SELECT $1::uuid AS ws) w LEFT JOIN workspace_budgets b ON b.workspace_id = w.ws"
        " LEFT JOIN workspace_usage u ON u.workspace_id = w.ws AND u.day = (now() AT TIME ZONE 'UTC')::date",
        workspace_id,
    )
    assert row is not None
    return dict(row)


MAX_DAILY_USD = 10_000_000
"""The largest daily USD limit stored: ``workspace_budgets.daily_usd`` is ``numeric(14, 6)``,
which overflows at 10**8 (an error, not a clamp); this leaves room for rounding."""

MAX_DAILY_TOKENS = 10**15
"""The largest daily token limit (well inside ``bigint``)."""


async def set_budget(
    pool: asyncpg.Pool, workspace_id: UUID, daily_usd: float | None, daily_tokens: int | None
) -> datetime:
    """Set the workspace's daily limits (None: back to the default)."""
    usd = None if daily_usd is None else Decimal(str(daily_usd))
    value = await pool.fetchval(
        "INSERT INTO workspace_budgets (workspace_id, daily_usd, daily_tokens) VALUES ($1, $2, $3)"
        " ON CONFLICT (workspace_id) DO UPDATE SET daily_usd = excluded.daily_usd,"
        " daily_tokens = excluded.daily_tokens, updated_at = now() RETURNING updated_at",
        workspace_id, usd, daily_tokens,
    )  # fmt: skip
    assert isinstance(value, datetime)
    return value


async def add_model_call(
    conn: Connection, workspace_id: UUID, usage: tuple[int, int, int], usd: float
) -> None:
    """Count a model call made outside any run (the event gate) in the workspace's day (UTC)."""
    await conn.execute(
        "INSERT INTO workspace_usage AS w (workspace_id, day, input_tokens, output_tokens,"
        " cached_input_tokens, usd_cost, model_calls)"
        " VALUES ($1, (now() AT TIME ZONE 'UTC')::date, $2, $3, $4, $5, 1)"
        " ON CONFLICT (workspace_id, day) DO UPDATE SET"
        " input_tokens = w.input_tokens + excluded.input_tokens,"
        " output_tokens = w.output_tokens + excluded.output_tokens,"
        " cached_input_tokens = w.cached_input_tokens + excluded.cached_input_tokens,"
        " usd_cost = w.usd_cost + excluded.usd_cost, model_calls = w.model_calls + 1",
        workspace_id, *usage, Decimal(str(round(usd, 6))),
    )  # fmt: skip
