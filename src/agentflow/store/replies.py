"""Named queries for free-text replies to requests (``request_replies``): keep one as it
arrived, claim unread ones with a lease, record what the model read in them.

A reply is kept once per request and Message-ID (a mail system that delivers twice changes
nothing). Reading it is fenced on the claim: a worker whose lease lapsed records nothing.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg

_COLUMNS = (
    "workspace_id, id, request_id, via, message_id, sender, given_to, text, received_at, label, score,"
    " verdict, outcome, classified_at, attempts"
)

_KEEP = f"""
INSERT INTO request_replies (workspace_id, request_id, via, message_id, sender, given_to, text,
                             label, outcome, verdict, classified_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, CASE WHEN $9::text IS NULL THEN NULL ELSE now() END)
ON CONFLICT (workspace_id, request_id, message_id) DO NOTHING
RETURNING {_COLUMNS}
"""

_CLAIM = f"""
WITH due AS (
    SELECT workspace_id, id FROM request_replies
    WHERE outcome IS NULL AND due_at <= now() AND (lease_expires_at IS NULL OR lease_expires_at < now())
    ORDER BY due_at LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE request_replies r
SET lease_owner = $1, lease_expires_at = now() + make_interval(secs => $2), attempts = r.attempts + 1
FROM due WHERE r.workspace_id = due.workspace_id AND r.id = due.id
RETURNING {", ".join("r." + c.strip() for c in _COLUMNS.split(","))}
"""


async def keep(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    request_id: UUID,
    *,
    via: str,
    message_id: str,
    sender: str,
    given_to: str,
    text: str,
    settled: tuple[str, str, dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], bool]:
    """Keep a reply (or find the one already kept for this Message-ID); ``(reply, new)``.

    ``settled``: ``(label, outcome, verdict)`` of a reply no model needs to read (an
    automatic reply), recorded at once.
    """
    label, outcome, verdict = settled or (None, None, None)
    row = await pool.fetchrow(
        _KEEP, workspace_id, request_id, via, message_id, sender, given_to, text, label, outcome, verdict
    )
    if row is not None:
        return dict(row), True
    found = await pool.fetchrow(
        f"SELECT {_COLUMNS} FROM request_replies"
        " WHERE workspace_id = $1 AND request_id = $2 AND message_id = $3",
        workspace_id, request_id, message_id,
    )  # fmt: skip
    assert found is not None
    return dict(found), False


async def claim(pool: asyncpg.Pool, owner: str, lease_seconds: float, limit: int) -> list[dict[str, Any]]:
    """Claim unread replies that are due (and not leased by a live claim), oldest first."""
    rows = await pool.fetch(_CLAIM, owner, lease_seconds, limit)
    return [dict(r) for r in rows]


async def record(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    reply_id: UUID,
    owner: str,
    *,
    label: str | None,
    score: float | None,
    verdict: dict[str, Any],
    outcome: str,
) -> bool:
    """Record the reading of a claimed reply; False when the claim was lost meanwhile."""
    status = await pool.execute(
        "UPDATE request_replies SET label = $4, score = $5, verdict = $6, outcome = $7,"
        " classified_at = now(), lease_owner = NULL, lease_expires_at = NULL"
        " WHERE workspace_id = $1 AND id = $2 AND lease_owner = $3 AND outcome IS NULL",
        workspace_id, reply_id, owner, label, score, verdict, outcome,
    )  # fmt: skip
    return status.endswith(" 1")


async def retry_later(
    pool: asyncpg.Pool, workspace_id: UUID, reply_id: UUID, owner: str, delay: float, error: dict[str, Any]
) -> None:
    """Give a claimed reply back, to be read again after ``delay`` seconds."""
    await pool.execute(
        "UPDATE request_replies SET lease_owner = NULL, lease_expires_at = NULL,"
        " due_at = now() + make_interval(secs => $4), verdict = jsonb_build_object('last_error', $5::jsonb)"
        " WHERE workspace_id = $1 AND id = $2 AND lease_owner = $3 AND outcome IS NULL",
        workspace_id, reply_id, owner, delay, error,
    )  # fmt: skip


async def remember_thread(
    pool: asyncpg.Pool, workspace_id: UUID, request_id: UUID, channel: str, ts: str
) -> None:
    """Remember that ``request_id`` was posted to Slack as the message ``ts`` in ``channel``."""
    await pool.execute(
        "INSERT INTO request_threads (workspace_id, request_id, channel, ts) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT DO NOTHING",
        workspace_id, request_id, channel, ts,
    )  # fmt: skip


async def thread_request(pool: asyncpg.Pool, channel: str, ts: str) -> dict[str, Any] | None:
    """The request posted as the Slack message ``ts`` of ``channel``: ``workspace_id``,
    ``request_id``; or None."""
    row = await pool.fetchrow(
        "SELECT workspace_id, request_id FROM request_threads WHERE channel = $1 AND ts = $2", channel, ts
    )
    return dict(row) if row else None


async def list_replies(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    *,
    request_id: UUID | None = None,
    outcome: str | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """Replies, newest first: of one request, or of any with this ``outcome`` (``held``)."""
    rows = await pool.fetch(
        f"SELECT {_COLUMNS} FROM request_replies WHERE workspace_id = $1"
        " AND ($2::uuid IS NULL OR request_id = $2) AND ($3::text IS NULL OR outcome = $3)"
        " ORDER BY received_at DESC, id LIMIT $4",
        workspace_id, request_id, outcome, limit,
    )  # fmt: skip
    return [dict(r) for r in rows]
