"""What an eval replays: recorded agent runs and, for each decision, what its run had then."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.frozen import frozen
from agentflow.core.records import RunRecord


@frozen
class RecordedDecision:
    """A completed ``agent.decide`` step: when it began, what it saw and what it chose."""

    seq: int
    started_at: datetime
    input: Any
    output: Any


async def recorded_runs(
    pool: asyncpg.Pool, workspace_id: UUID, workflow_id: UUID, limit: int
) -> list[RunRecord]:
    """The workflow's newest ended runs (completed or failed) that made decisions, newest first."""
    rows = await pool.fetch(
        "SELECT r.* FROM runs r WHERE r.workspace_id = $1 AND r.workflow_id = $2"
        " AND r.status IN ('completed', 'failed') AND EXISTS (SELECT 1 FROM run_steps s"
        "   WHERE s.workspace_id = r.workspace_id AND s.run_id = r.id AND s.kind = 'agent.decide')"
        " ORDER BY r.created_at DESC LIMIT $3",
        workspace_id, workflow_id, limit,
    )  # fmt: skip
    return [RunRecord.from_row(r) for r in rows]


async def decisions(pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID) -> list[RecordedDecision]:
    """The run's completed decisions, in order."""
    rows = await pool.fetch(
        "SELECT seq, started_at, input, output FROM run_steps WHERE workspace_id = $1 AND run_id = $2"
        " AND kind = 'agent.decide' AND status = 'completed' ORDER BY seq",
        workspace_id, run_id,
    )  # fmt: skip
    return [RecordedDecision(r["seq"], r["started_at"], r["input"], r["output"]) for r in rows]


async def tasks_before(
    pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID, moment: datetime
) -> list[dict[str, Any]]:
    """The tasks the run had created by ``moment`` (as they are stored now)."""
    rows = await pool.fetch(
        "SELECT id, title, description, assignee, due_at, priority, status, account_id, revision,"
        " expires_at, completed_at FROM tasks WHERE workspace_id = $1 AND run_id = $2 AND created_at <= $3"
        " ORDER BY created_at, id",
        workspace_id, run_id, moment,
    )  # fmt: skip
    return [
        {
            k: (v.isoformat() if hasattr(v, "isoformat") else str(v) if isinstance(v, UUID) else v)
            for k, v in r.items()
        }
        for r in rows
    ]


async def events_seen(pool: asyncpg.Pool, workspace_id: UUID, run_id: UUID, seq: int) -> list[dict[str, Any]]:
    """The deliveries decision ``seq`` saw (and consumed), as the context shows them."""
    rows = await pool.fetch(
        "SELECT kind, payload, created_at FROM run_inbox WHERE workspace_id = $1 AND run_id = $2"
        " AND consumed_seq = $3 AND kind <> 'trigger' ORDER BY id",  # trigger rows: consumed at the start
        workspace_id, run_id, seq,
    )  # fmt: skip
    return [
        {"kind": r["kind"], "payload": r["payload"], "created_at": r["created_at"].isoformat()} for r in rows
    ]
