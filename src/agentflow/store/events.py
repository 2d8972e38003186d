"""Named queries for the event log: publish idempotently, read below the horizon, cursors.

Readers only see events whose writing transaction is older than every transaction still
running (``xid < pg_snapshot_xmin(pg_current_snapshot())``), in (xid, seq) order. Nothing
can commit behind such a reader later, so it never skips a late commit, and it needs no
fixed delay. The price: a long transaction anywhere in the cluster holds delivery back until
it ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.core.accounts import is_account_topic
from agentflow.core.events import Event, Position, Publication
from agentflow.core.frozen import frozen
from agentflow.store import accounts
from agentflow.store.database import Connection

EVENTS_CHANNEL = "agentflow_events"
_COLUMNS = (
    "workspace_id, topic, message_id, xid, seq, data, account_id, published_at, received_at, trace_parent"
)


@frozen
class NewEvent:
    """An event ready to store (ids and times resolved)."""

    topic: str
    message_id: str
    data: dict[str, Any]
    published_at: datetime | None
    account_id: str | None


_PUBLISH = f"""
WITH input AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::jsonb[], $5::timestamptz[], $6::text[])
        AS i(topic, message_id, data, published_at, account_id)
), ins AS (
    INSERT INTO events (workspace_id, topic, message_id, data, published_at, account_id, trace_parent)
    SELECT $1, topic, message_id, data, coalesce(published_at, now()), account_id, $7 FROM input
    ON CONFLICT (workspace_id, topic, message_id) DO NOTHING
    RETURNING {_COLUMNS}
)
SELECT ins.*, true AS created, pg_notify('{EVENTS_CHANNEL}', '') IS NULL AS notified FROM ins
"""


async def publish(
    pool: asyncpg.Pool | Connection,
    workspace_id: UUID,
    events: Sequence[NewEvent],
    trace_parent: str | None = None,
) -> list[Publication]:
    """Store events; an event whose (topic, message_id) exists returns the stored one.

    One statement (one commit) for the whole batch; the answer follows the input's order.
    A key repeated within the batch is stored once, from its first occurrence; the repeats
    answer with that event and ``created`` false, as a later batch would.
    Given a connection inside a transaction, the events commit with the caller's other writes.
    New ``account.*`` events also upsert their accounts, in the same transaction.
    """
    if any(is_account_topic(e.topic) for e in events):
        if isinstance(pool, asyncpg.Pool):
            async with pool.acquire() as conn, conn.transaction():
                return await publish(conn, workspace_id, events, trace_parent)
        if not pool.is_in_transaction():
            async with pool.transaction():
                return await publish(pool, workspace_id, events, trace_parent)
    # Deduplicated here, not left to ON CONFLICT: the insert would keep one row of the key
    # but every input row would then match it and claim to have created it.
    first: dict[tuple[str, str], NewEvent] = {}
    for e in events:
        first.setdefault((e.topic, e.message_id), e)
    unique = list(first.values())
    rows = await pool.fetch(
        _PUBLISH,
        workspace_id,
        [e.topic for e in unique],
        [e.message_id for e in unique],
        [e.data for e in unique],
        [e.published_at for e in unique],
        [e.account_id for e in unique],
        trace_parent,
    )
    created: dict[tuple[str, str], Publication] = {
        (r["topic"], r["message_id"]): Publication(_event(r), True) for r in rows
    }
    await accounts.apply_events(pool, workspace_id, [p.event for p in created.values()])
    found = {key: Publication(p.event, False) for key, p in created.items()}
    missing = [e for e in unique if (e.topic, e.message_id) not in created]
    if missing:  # published before (or concurrently): read them in a new snapshot
        existing = await pool.fetch(
            f"SELECT {_COLUMNS} FROM events e JOIN unnest($2::text[], $3::text[]) AS k(topic, message_id)"
            " USING (topic, message_id) WHERE e.workspace_id = $1",
            workspace_id,
            [e.topic for e in missing],
            [e.message_id for e in missing],
        )
        for r in existing:
            found.setdefault((r["topic"], r["message_id"]), Publication(_event(r), False))
    answers: list[Publication] = []
    for e in events:
        key = (e.topic, e.message_id)
        # The first occurrence of a key this batch created says so; every other says not.
        fresh = created.pop(key, None)
        answers.append(fresh if fresh is not None else found[key])
    return answers


async def read_after(
    conn: Connection | asyncpg.Pool,
    after: Position,
    limit: int,
    workspace_id: UUID | None = None,
) -> list[Event]:
    """Events after ``after`` whose transactions are older than every running one, in order."""
    rows = await conn.fetch(
        f"SELECT {_COLUMNS} FROM events"
        " WHERE (xid, seq) > ($1::xid8, $2::bigint)"
        "   AND xid < pg_snapshot_xmin(pg_current_snapshot())"
        "   AND ($4::uuid IS NULL OR workspace_id = $4)"
        " ORDER BY xid, seq LIMIT $3",
        after.xid,
        after.seq,
        limit,
        workspace_id,
    )
    return [_event(r) for r in rows]


async def lock_position(conn: Connection, consumer: str, workspace_id: UUID | None) -> Position | None:
    """Inside a transaction: the consumer's cursor, locked; None if another instance holds it.

    Registers the consumer at the start of the log on first use.
    """
    row = await conn.fetchrow(_LOCK_POSITION, consumer, workspace_id)
    return Position(int(row["xid"]), row["seq"]) if row else None


# One round trip: a new consumer's row comes from its insert (which this transaction holds
# until it commits); an existing one is locked, unless another instance holds it (no row).
_LOCK_POSITION = """
WITH new AS (
    INSERT INTO consumer_offsets (consumer, workspace_id) VALUES ($1, $2) ON CONFLICT DO NOTHING
    RETURNING xid, seq
)
SELECT xid, seq FROM new
UNION ALL
SELECT * FROM (SELECT xid, seq FROM consumer_offsets WHERE consumer = $1 FOR UPDATE SKIP LOCKED) AS held
"""


async def store_position(conn: Connection, consumer: str, position: Position) -> None:
    """Inside the same transaction as the consumer's effects: move its cursor."""
    await conn.execute(
        "UPDATE consumer_offsets SET xid = $2::xid8, seq = $3, updated_at = now() WHERE consumer = $1",
        consumer,
        position.xid,
        position.seq,
    )


_LAG = (
    "SELECT o.consumer, count(e.*) AS events,"
    " coalesce(extract(epoch FROM now() - min(e.received_at)), 0)::float8 AS seconds"
    " FROM consumer_offsets o LEFT JOIN events e ON (e.xid, e.seq) > (o.xid, o.seq)"
    " AND (o.workspace_id IS NULL OR e.workspace_id = o.workspace_id)"
    " WHERE $1::text IS NULL OR o.consumer = $1 GROUP BY o.consumer"
)


async def lag(pool: asyncpg.Pool, consumer: str) -> dict[str, Any]:
    """How far a consumer is behind: events after its cursor and the oldest one's age."""
    return (await lags(pool, consumer)).get(consumer, {"events": 0, "seconds": 0.0})


async def lags(pool: asyncpg.Pool, consumer: str | None = None) -> dict[str, dict[str, Any]]:
    """``lag`` of every registered consumer (or of one), by name."""
    rows = await pool.fetch(_LAG, consumer)
    return {r["consumer"]: {"events": int(r["events"]), "seconds": float(r["seconds"])} for r in rows}


async def prune(pool: asyncpg.Pool, older_than: float) -> int:
    """Delete events received more than ``older_than`` seconds ago that every consumer has read."""
    result = await pool.execute(
        "DELETE FROM events e WHERE e.received_at < now() - make_interval(secs => $1)"
        " AND NOT EXISTS (SELECT 1 FROM consumer_offsets o WHERE (e.xid, e.seq) > (o.xid, o.seq)"
        "   AND (o.workspace_id IS NULL OR o.workspace_id = e.workspace_id))",
        older_than,
    )
    return int(result.split()[-1])


async def for_account(
    pool: asyncpg.Pool,
    workspace_id: UUID,
    account_id: str,
    since_seconds: float,
    limit: int = 500,
    sources: list[str] | None = None,
) -> list[Event]:
    """What happened for an account recently, newest first, optionally from some sources only
    (a source is a topic's first segment). One query on the account index."""
    rows = await pool.fetch(
        f"SELECT {_COLUMNS} FROM events WHERE workspace_id = $1 AND account_id = $2"
        " AND published_at >= now() - make_interval(secs => $3)"
        " AND ($5::text[] IS NULL OR split_part(topic, '.', 1) = ANY($5::text[]))"
        " ORDER BY published_at DESC LIMIT $4",
        workspace_id,
        account_id,
        since_seconds,
        limit,
        sources,
    )
    return [_event(r) for r in rows]


async def by_ids(
    conn: Connection, workspace_id: UUID, ids: list[tuple[str, str]]
) -> dict[tuple[str, str], Event]:
    """The stored events among ``ids`` (topic, message id), by id."""
    rows = await conn.fetch(
        f"SELECT {_COLUMNS} FROM events WHERE workspace_id = $1"
        " AND (topic, message_id) IN (SELECT * FROM unnest($2::text[], $3::text[]))",
        workspace_id,
        [topic for topic, _ in ids],
        [message_id for _, message_id in ids],
    )
    return {(r["topic"], r["message_id"]): _event(r) for r in rows}


def _event(row: Any) -> Event:
    return Event(
        workspace_id=row["workspace_id"],
        topic=row["topic"],
        message_id=row["message_id"],
        xid=int(row["xid"]),
        seq=row["seq"],
        data=row["data"],
        account_id=row["account_id"],
        published_at=row["published_at"],
        received_at=row["received_at"],
        trace_parent=row["trace_parent"],
    )
