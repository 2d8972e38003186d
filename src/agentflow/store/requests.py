"""Named queries for human requests (``requests``): list and read them, record the first
answer, and expire the ones past their time.

An answer and its delivery to the run's inbox commit in one statement, conditioned on the
request still being pending and in time: of two concurrent answers one wins, the other finds
it answered. The sweep that expires requests delivers the timeout the same way, so an answer
and a timeout never both reach the run.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg

from agentflow.store.database import Connection

_COLUMNS = (
    "q.id, q.workspace_id, q.run_id, r.workflow_id, q.step_seq, q.kind, q.node_id, q.tool, q.message, q.spec,"
    " q.arguments, q.arguments_hash, q.assignees, q.channels, q.timeout_action, q.status,"
    " q.response, q.reason, q.decided_by AS responded_by, q.responded_via, q.created_at,"
    " q.expires_at, q.decided_at AS responded_at,"
    " (q.status = 'pending' AND q.expires_at IS NOT NULL AND q.expires_at <= now()) AS expired"
)


async def list_requests(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    *,
    status: str | None = None,
    assignee: str | None = None,
    workflow_id: UUID | None = None,
    run_id: UUID | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """Requests, newest first; ``assignee`` also matches requests anyone may answer."""
    rows = await pool.fetch(
        f"SELECT {_COLUMNS} FROM requests q"
        " JOIN runs r ON r.workspace_id = q.workspace_id AND r.id = q.run_id"
        " WHERE q.workspace_id = $1 AND ($2::text IS NULL OR q.status = $2)"
        " AND ($3::text IS NULL OR q.assignees = '{}' OR $3 = ANY (q.assignees))"
        " AND ($4::uuid IS NULL OR r.workflow_id = $4) AND ($5::uuid IS NULL OR q.run_id = $5)"
        " ORDER BY q.created_at DESC, q.id LIMIT $6",
        workspace_id, status, assignee, workflow_id, run_id, limit,
    )  # fmt: skip
    return [dict(r) for r in rows]


async def get_request(pool: asyncpg.Pool, workspace_id: UUID, request_id: UUID) -> dict[str, Any] | None:
    """One request, or None."""
    row = await pool.fetchrow(
        f"SELECT {_COLUMNS} FROM requests q"
        " JOIN runs r ON r.workspace_id = q.workspace_id AND r.id = q.run_id"
        " WHERE q.workspace_id = $1 AND q.id = $2",
        workspace_id, request_id,
    )  # fmt: skip
    return dict(row) if row else None


async def find_by_link(pool: asyncpg.Pool, request_id: UUID, digest: str) -> dict[str, Any] | None:
    """A request by id alone (a link names no workspace) when ``digest`` is the hash of one of
    its links' tokens: its ``workspace_id``, ``kind``, the link's ``holder`` (channel and to
    whom, see ``core.link_tokens``) and whether it is past its time (``expired``)."""
    row = await pool.fetchrow(
        "SELECT workspace_id, kind, link_tokens->>$2 AS holder,"
        " (expires_at IS NOT NULL AND expires_at <= now()) AS expired"
        " FROM requests WHERE id = $1 AND link_tokens ? $2",
        request_id, digest,
    )  # fmt: skip
    return dict(row) if row else None


# The answer, and the run told through its inbox (the inbox trigger wakes it), at once.
_ANSWER = """
WITH a AS (
    UPDATE requests SET status = $3, response = $4, reason = $5, decided_by = $6,
                        responded_via = $7, decided_at = now()
    WHERE workspace_id = $1 AND id = $2 AND status = 'pending' AND node_id IS NOT NULL
      AND (expires_at IS NULL OR expires_at > now())
    RETURNING workspace_id, id, run_id, status, response, reason, decided_by, responded_via, decided_at
), d AS (
    INSERT INTO run_inbox (workspace_id, run_id, kind, payload)
    SELECT a.workspace_id, a.run_id, 'request', jsonb_build_object(
        'request_id', a.id, 'outcome', $8::text, 'response', a.response, 'reason', a.reason,
        'responded_by', a.decided_by, 'responded_via', a.responded_via,
        'responded_at', to_jsonb(a.decided_at))
    FROM a JOIN runs r ON r.workspace_id = a.workspace_id AND r.id = a.run_id AND r.active
    RETURNING id
)
SELECT (SELECT count(*) FROM a) AS answered
"""


async def answer(
    pool: asyncpg.Pool | Connection,
    workspace_id: UUID,
    request_id: UUID,
    *,
    status: str,
    outcome: str,
    response: Any,
    reason: str | None,
    responded_by: str | None,
    via: str,
) -> bool:
    """Record the first answer of a pending, unexpired node request and tell its run.

    Returns False when nothing was recorded (answered already, expired, not found).
    """
    row = await pool.fetchrow(
        _ANSWER, workspace_id, request_id, status, response, reason, responded_by, via, outcome
    )
    return row is not None and row["answered"] == 1


_EVENT_WAITS = """
SELECT id, workspace_id, spec->>'topic' AS topic, spec->'match' AS match FROM requests
WHERE kind = 'event' AND status = 'pending' AND (expires_at IS NULL OR expires_at > now())
  AND (workspace_id, spec->>'topic') IN (SELECT * FROM unnest($1::uuid[], $2::text[]))
ORDER BY created_at, id
"""


async def event_waits(conn: Connection, keys: set[tuple[UUID, str]]) -> list[dict[str, Any]]:
    """Pending, unexpired waits for events of these (workspace, topic) pairs, oldest first:
    ``id``, ``workspace_id``, ``topic`` and the rendered ``match``."""
    if not keys:
        return []
    workspaces, topics = zip(*sorted(keys, key=str), strict=True)
    rows = await conn.fetch(_EVENT_WAITS, list(workspaces), list(topics))
    return [dict(r) for r in rows]


_EXPIRE = """
WITH due AS (
    SELECT workspace_id, id FROM requests
    WHERE status = 'pending' AND node_id IS NOT NULL AND expires_at <= now()
    ORDER BY expires_at LIMIT $1
    FOR UPDATE SKIP LOCKED
), x AS (
    UPDATE requests q SET status = 'expired', decided_at = now()
    FROM due WHERE q.workspace_id = due.workspace_id AND q.id = due.id
    RETURNING q.workspace_id, q.id, q.run_id, q.decided_at
), d AS (
    INSERT INTO run_inbox (workspace_id, run_id, kind, payload)
    SELECT x.workspace_id, x.run_id, 'request', jsonb_build_object(
        'request_id', x.id, 'outcome', 'timeout', 'responded_at', to_jsonb(x.decided_at))
    FROM x JOIN runs r ON r.workspace_id = x.workspace_id AND r.id = x.run_id AND r.active
    RETURNING id
)
SELECT count(*) AS expired FROM x
"""


async def expire_due(conn: Connection, limit: int = 100) -> int:
    """Expire up to ``limit`` pending node requests past their time and tell their runs;
    return how many."""
    value = await conn.fetchval(_EXPIRE, limit)
    return int(value or 0)
