"""Agent memory: reading a key's summary and latest messages, listing, forgetting, expiring.

Messages and summaries are written by the checkpoint of the step that makes them (see
``agentflow.store.checkpoint_sql``); this module only reads and deletes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.agent_memory import MemoryEntry, Recollection

_SUMMARY = """
SELECT through_seq, summary FROM memory_summaries
WHERE workspace_id = $1 AND namespace = $2 AND memory_key = $3 AND expires_at > now()
"""
# The window: the latest messages after the summary, newest first, leaving out the asking
# run's own (it sees those as its history).
_LATEST = """
SELECT seq, role, content, created_at FROM memory_messages
WHERE workspace_id = $1 AND namespace = $2 AND memory_key = $3 AND seq > $4
  AND run_id <> $5 AND expires_at > now()
ORDER BY seq DESC
LIMIT $6
"""
# What is older than the window and not yet summarised, oldest first (every run's: the summary
# covers everything up to the seq it names).
_OLDER = """
SELECT seq, role, content, created_at FROM memory_messages
WHERE workspace_id = $1 AND namespace = $2 AND memory_key = $3 AND seq > $4 AND seq < $5
  AND expires_at > now()
ORDER BY seq
LIMIT $6
"""
FOLD_AT_MOST = 4
"""A summary folds at most this many windows of messages at once (the rest the next time)."""
_PAGE = """
SELECT seq, run_id, step_seq, role, content, created_at, expires_at FROM memory_messages
WHERE workspace_id = $1 AND namespace = $2 AND memory_key = $3 AND seq < $4 AND expires_at > now()
ORDER BY seq DESC
LIMIT $5
"""
_STATS = """
SELECT count(*) AS messages, coalesce(sum(octet_length(content)), 0) AS bytes,
       min(created_at) AS first_at, max(created_at) AS last_at
FROM memory_messages
WHERE workspace_id = $1 AND namespace = $2 AND memory_key = $3 AND expires_at > now()
"""
_FORGET = """
WITH m AS (
    DELETE FROM memory_messages WHERE workspace_id = $1 AND namespace = $2 AND memory_key = $3
    RETURNING 1
), s AS (
    DELETE FROM memory_summaries WHERE workspace_id = $1 AND namespace = $2 AND memory_key = $3
)
SELECT count(*) FROM m
"""
_EXPIRE = """
WITH m AS (
    DELETE FROM memory_messages WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM memory_messages WHERE expires_at <= now() LIMIT $1))
    RETURNING 1
), s AS (
    DELETE FROM memory_summaries WHERE expires_at <= now()
)
SELECT count(*) FROM m
"""


async def recall(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    namespace: str,
    key: str,
    *,
    run_id: UUID,
    window: int,
    folding: bool,
) -> Recollection:
    """What a decision of ``run_id`` loads: the summary and the latest ``window`` messages of
    other runs after it; with ``folding`` and a full window, also the older messages not yet
    summarised (oldest first, at most ``FOLD_AT_MOST`` windows)."""
    older: list[asyncpg.Record] = []
    async with pool.acquire() as conn:
        summary = await conn.fetchrow(_SUMMARY, workspace_id, namespace, key)
        through = int(summary["through_seq"]) if summary is not None else 0
        rows = await conn.fetch(_LATEST, workspace_id, namespace, key, through, run_id, window)
        if folding and len(rows) == window:
            oldest = rows[-1]["seq"]
            older = await conn.fetch(
                _OLDER, workspace_id, namespace, key, through, oldest, window * FOLD_AT_MOST
            )
    return Recollection(
        key,
        summary["summary"] if summary is not None else None,
        tuple(_entry(r) for r in reversed(rows)),
        tuple(_entry(r) for r in older),
    )


def _entry(row: asyncpg.Record) -> MemoryEntry:
    return MemoryEntry(row["seq"], row["role"], row["content"], row["created_at"])


async def page(
    pool: asyncpg.Pool, workspace_id: UUID, namespace: str, key: str, *, before: int | None, limit: int
) -> dict[str, Any]:
    """One key's memory as the API shows it: totals, the summary, and messages newest first
    (``before``: a page's ``next_before`` to go further back)."""
    async with pool.acquire() as conn:
        stats = await conn.fetchrow(_STATS, workspace_id, namespace, key)
        summary = await conn.fetchrow(_SUMMARY, workspace_id, namespace, key)
        rows = await conn.fetch(_PAGE, workspace_id, namespace, key, before or 2**62, limit)
    assert stats is not None  # an aggregate always answers one row
    messages = [
        {
            "seq": r["seq"],
            "run_id": str(r["run_id"]),
            "step": r["step_seq"],
            "role": r["role"],
            "content": r["content"],
            "created_at": _iso(r["created_at"]),
            "expires_at": _iso(r["expires_at"]),
        }
        for r in rows
    ]
    return {
        "namespace": namespace,
        "key": key,
        "messages_total": stats["messages"],
        "bytes": stats["bytes"],
        "first_at": _iso(stats["first_at"]),
        "last_at": _iso(stats["last_at"]),
        "summary": None
        if summary is None
        else {"text": summary["summary"], "through_seq": summary["through_seq"]},
        "messages": messages,
        "next_before": messages[-1]["seq"] if len(messages) == limit else None,
    }


async def forget(pool: asyncpg.Pool, workspace_id: UUID, namespace: str, key: str) -> int:
    """Delete one key's memory (messages and summary); return how many messages were deleted."""
    return int(await pool.fetchval(_FORGET, workspace_id, namespace, key))


async def expire(pool: asyncpg.Pool, batch: int = 10_000) -> int:
    """Delete messages and summaries past their retention (at most ``batch`` messages)."""
    return int(await pool.fetchval(_EXPIRE, batch))


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
