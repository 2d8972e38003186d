"""Named queries of gate requests: events waiting for the event gate's verdict.

A request is claimed with a lease (``due_at`` moves to the lease's end, ``attempts`` grows
and fences the claim), asked outside any transaction, then decided in a transaction that
names the attempt it claimed: a claim that lost its lease decides nothing.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from agentflow.core.frozen import frozen
from agentflow.store.database import Connection


async def request(
    conn: Connection,
    workspace_id: UUID,
    workflow_id: UUID,
    version: int,
    event_doc: dict[str, Any],
    trigger_doc: dict[str, Any],
) -> int:
    """Queue a matching event for the gate (inside the dispatcher's transaction)."""
    value: int = await conn.fetchval(
        "INSERT INTO gate_requests (workspace_id, workflow_id, workflow_version, event, trigger)"
        " VALUES ($1, $2, $3, $4, $5) RETURNING id",
        workspace_id,
        workflow_id,
        version,
        event_doc,
        trigger_doc,
    )
    return value


@frozen
class GateRequest:
    """A claimed request."""

    workspace_id: UUID
    id: int
    workflow_id: UUID
    workflow_version: int
    event: dict[str, Any]
    trigger: dict[str, Any]
    attempts: int


async def claim(conn: Connection, owner: str, limit: int, lease_seconds: float) -> list[GateRequest]:
    """Claim due requests for ``lease_seconds`` (one statement; commits on its own)."""
    rows = await conn.fetch(
        "WITH due AS (SELECT workspace_id, id FROM gate_requests WHERE due_at <= now()"
        "  ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
        " UPDATE gate_requests g SET lease_owner = $1, attempts = g.attempts + 1,"
        "  due_at = now() + make_interval(secs => $3)"
        " FROM due WHERE g.workspace_id = due.workspace_id AND g.id = due.id"
        " RETURNING g.workspace_id, g.id, g.workflow_id, g.workflow_version, g.event, g.trigger, g.attempts",
        owner,
        limit,
        lease_seconds,
    )
    return [GateRequest(**dict(r)) for r in rows]


async def lock_claimed(conn: Connection, claimed: GateRequest, owner: str) -> bool:
    """Inside the deciding transaction: lock the request if this claim still holds it."""
    row = await conn.fetchrow(
        "SELECT 1 FROM gate_requests WHERE workspace_id = $1 AND id = $2 AND status = 'pending'"
        " AND lease_owner = $3 AND attempts = $4 FOR UPDATE",
        claimed.workspace_id,
        claimed.id,
        owner,
        claimed.attempts,
    )
    return row is not None


async def finish(conn: Connection, claimed: GateRequest, verdict: dict[str, Any]) -> None:
    """Mark a locked request decided with its verdict."""
    await conn.execute(
        "UPDATE gate_requests SET status = 'decided', verdict = $3, due_at = NULL, lease_owner = NULL,"
        " decided_at = now() WHERE workspace_id = $1 AND id = $2",
        claimed.workspace_id,
        claimed.id,
        verdict,
    )


async def retry_later(conn: Connection, claimed: GateRequest, owner: str, delay: float, error: Any) -> bool:
    """Give a claim back to be asked again after ``delay`` seconds; False if the lease was lost."""
    row = await conn.fetchrow(
        "UPDATE gate_requests SET lease_owner = NULL, due_at = now() + make_interval(secs => $5),"
        " verdict = $6 WHERE workspace_id = $1 AND id = $2 AND status = 'pending'"
        " AND lease_owner = $3 AND attempts = $4 RETURNING id",
        claimed.workspace_id,
        claimed.id,
        owner,
        claimed.attempts,
        delay,
        {"last_error": error},
    )
    return row is not None


async def seconds_to_next(conn: Connection) -> float | None:
    """Seconds until the earliest pending request is due; None when there is none."""
    value = await conn.fetchval(
        "SELECT extract(epoch FROM min(due_at) - clock_timestamp())::float8 FROM gate_requests"
        " WHERE due_at IS NOT NULL"
    )
    return None if value is None else float(value)
