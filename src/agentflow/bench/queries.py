"""The benchmark's own SQL: setting runs due together, and reading DB-clock timestamps.

These statements exist only to measure the engine (they read the engine's tables, W1
moves ``due_at`` of runs no worker has seen yet, E3 holds event delivery back), so they
live here rather than in ``agentflow.store``. Every time is the database clock:
``events.received_at`` is the publish statement's ``now()``, ``runs.created_at`` the start
run's (or the dispatcher transaction's) ``now()``, ``runs.started_at`` the first claim's
``now()``, ``run_steps.started_at`` the checkpoint's ``clock_timestamp()`` minus the step's
measured duration, and ``run_steps.finished_at`` the checkpoint's ``clock_timestamp()``.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from uuid import UUID

import asyncpg

from agentflow.core.frozen import frozen
from agentflow.store.database import WAKE_CHANNEL
from agentflow.store.events import EVENTS_CHANNEL

TERMINAL = ("completed", "failed", "canceled")


async def park(pool: asyncpg.Pool, workflow_id: UUID) -> int:
    """Make the workflow's unclaimed runs due in an hour (so starting workers skip them)."""
    result: str = await pool.execute(
        "UPDATE runs SET due_at = now() + interval '1 hour'"
        " WHERE workflow_id = $1 AND status = 'created' AND lease_owner IS NULL",
        workflow_id,
    )
    return int(result.split()[-1])


async def release(pool: asyncpg.Pool, workflow_id: UUID) -> datetime:
    """Make the parked runs due now and wake the workers; return the instant just before the
    commit that makes them visible (DB clock)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "UPDATE runs SET due_at = now() WHERE workflow_id = $1 AND status = 'created'"
            " AND lease_owner IS NULL",
            workflow_id,
        )
        # clock_timestamp(), not now(): the runs become due when this commits, after the update.
        released: datetime = await conn.fetchval(
            f"SELECT clock_timestamp() FROM pg_notify('{WAKE_CHANNEL}', '')"
        )
    return released


async def wait_until_ended(
    pool: asyncpg.Pool, workflow_id: UUID | None, count: int, timeout: float, poll: float = 0.1
) -> dict[str, int]:
    """Poll until ``count`` runs of the workflow (of any workflow when None) have ended;
    return runs by status.

    Raises:
        TimeoutError: they had not all ended after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    where, args = ("WHERE workflow_id = $1", [workflow_id]) if workflow_id is not None else ("", [])
    while True:
        rows = await pool.fetch(f"SELECT status, count(*) AS n FROM runs {where} GROUP BY status", *args)
        by_status = {r["status"]: int(r["n"]) for r in rows}
        if sum(n for s, n in by_status.items() if s in TERMINAL) >= count:
            return by_status
        if time.monotonic() > deadline:
            raise TimeoutError(f"runs still active after {timeout:g}s: {by_status}")
        await asyncio.sleep(poll)


@frozen
class Span:
    """When a workflow's runs were created, first claimed and last completed (DB clock)."""

    first_created: datetime
    first_claimed: datetime
    last_completed: datetime
    completed: int

    def seconds_since(self, start: datetime) -> float:
        """Seconds from ``start`` to the last completion."""
        return (self.last_completed - start).total_seconds()


async def next_xid(pool: asyncpg.Pool) -> int:
    """The cluster's next transaction id, without taking one: transactions that wrote since an
    earlier reading are the difference (a read-only transaction takes none)."""
    return int(await pool.fetchval("SELECT pg_snapshot_xmax(pg_current_snapshot())::text"))


async def span(pool: asyncpg.Pool, workflow_id: UUID) -> Span:
    """The span of the workflow's runs."""
    row = await pool.fetchrow(
        "SELECT min(created_at) AS c, min(started_at) AS s, max(completed_at) AS e,"
        " count(*) FILTER (WHERE status = 'completed') AS n FROM runs WHERE workflow_id = $1",
        workflow_id,
    )
    if row is None or row["e"] is None:
        raise RuntimeError("no run of the workflow completed")
    return Span(row["c"], row["s"], row["e"], int(row["n"]))


async def step_gaps(pool: asyncpg.Pool, run_id: UUID) -> list[tuple[int, float, float]]:
    """Per step of a run after the first: (seq, seconds since the previous step finished,
    seconds the step itself ran)."""
    rows = await pool.fetch(
        "SELECT seq, extract(epoch FROM finished_at - lag(finished_at) OVER w)::float8 AS gap,"
        " extract(epoch FROM finished_at - started_at)::float8 AS ran"
        " FROM run_steps WHERE run_id = $1 AND status = 'completed' WINDOW w AS (ORDER BY seq)"
        " ORDER BY seq",
        run_id,
    )
    return [(r["seq"], r["gap"], r["ran"]) for r in rows if r["gap"] is not None]


@frozen
class StepTime:
    """One completed step of a run (seconds, DB clock).

    Attributes:
        run_id / seq / kind / name: which step (``agent.decide`` and the model, or
            ``agent.tool`` and the tool).
        gap: from the previous step's ``finished_at`` (for the first step, from the run's
            claim, ``runs.started_at``) to this one's: the step, its checkpoint statement and
            the worker's hand-off from the previous one.
        ran: ``finished_at - started_at``, the step's own measured duration (no checkpoint).
    """

    run_id: UUID
    seq: int
    kind: str
    name: str | None
    gap: float
    ran: float


async def step_times(pool: asyncpg.Pool, workflow_id: UUID) -> list[StepTime]:
    """Every completed step of the workflow's runs, in run and step order."""
    rows = await pool.fetch(
        "SELECT s.run_id, s.seq, s.kind, s.name,"
        " extract(epoch FROM s.finished_at - coalesce(lag(s.finished_at) OVER w, r.started_at))::float8"
        "  AS gap,"
        " extract(epoch FROM s.finished_at - s.started_at)::float8 AS ran"
        " FROM runs r JOIN run_steps s ON s.run_id = r.id"
        " WHERE r.workflow_id = $1 AND s.status = 'completed'"
        " WINDOW w AS (PARTITION BY s.run_id ORDER BY s.seq) ORDER BY s.run_id, s.seq",
        workflow_id,
    )
    return [StepTime(r["run_id"], r["seq"], r["kind"], r["name"], r["gap"], r["ran"]) for r in rows]


async def tasks_created(pool: asyncpg.Pool, workflow_id: UUID) -> int:
    """Tasks the workflow's runs created."""
    count: int = await pool.fetchval(
        "SELECT count(*) FROM tasks t JOIN runs r ON r.id = t.run_id WHERE r.workflow_id = $1",
        workflow_id,
    )
    return count


async def start_latencies(pool: asyncpg.Pool, workflow_id: UUID) -> list[tuple[float, float]]:
    """Per run: (seconds from created to claimed, seconds from created to its first step
    starting)."""
    rows = await pool.fetch(
        "SELECT extract(epoch FROM r.started_at - r.created_at)::float8 AS claimed,"
        " extract(epoch FROM s.started_at - r.created_at)::float8 AS stepped"
        " FROM runs r JOIN run_steps s ON s.run_id = r.id AND s.seq = 0 AND s.attempt = 1"
        " WHERE r.workflow_id = $1",
        workflow_id,
    )
    return [(r["claimed"], r["stepped"]) for r in rows]


async def wake_lateness(pool: asyncpg.Pool, workflow_id: UUID) -> list[tuple[float, bool]]:
    """Per run whose first step was a wait: (seconds from the wait's due time to the start
    of the next step, whether it woke while runs of the workflow were still being started).

    The due time is the wait step's ``finished_at`` plus its duration, or its ``until``
    when later. (The engine stores ``due_at = now() + duration`` with ``now()`` the
    checkpoint transaction's start, a fraction of a millisecond before ``finished_at``,
    so this can only understate lateness by that much.)
    """
    rows = await pool.fetch(
        "WITH last AS (SELECT max(created_at) AS at FROM runs WHERE workflow_id = $1)"
        " SELECT extract(epoch FROM b.started_at - greatest("
        "   a.finished_at + make_interval(secs => coalesce((a.input->>'duration')::float8, 0)),"
        "   (a.input->>'until')::timestamptz))::float8 AS late,"
        " b.started_at <= last.at AS during_starts"
        " FROM last, runs r"
        " JOIN run_steps a ON a.run_id = r.id AND a.seq = 0 AND a.status = 'completed'"
        " JOIN run_steps b ON b.run_id = r.id AND b.seq = 1 AND b.attempt = 1"
        " WHERE r.workflow_id = $1",
        workflow_id,
    )
    return [(r["late"], r["during_starts"]) for r in rows]


async def events_by_topic(pool: asyncpg.Pool) -> dict[str, int]:
    """How many events the log holds, by topic."""
    rows = await pool.fetch("SELECT topic, count(*) AS n FROM events GROUP BY topic")
    return {r["topic"]: int(r["n"]) for r in rows}


async def event_latencies(pool: asyncpg.Pool, workflow_id: UUID) -> list[tuple[float, float, float]]:
    """Per run an event started (``dispatch_decisions``), in the events' order: seconds from the
    event's ``received_at`` (its publish statement's ``now()``) to the run's creation (the
    dispatcher transaction's ``now()``), to its first claim, and to its first step starting."""
    rows = await pool.fetch(
        "SELECT extract(epoch FROM r.created_at - e.received_at)::float8 AS created,"
        " extract(epoch FROM r.started_at - e.received_at)::float8 AS claimed,"
        " extract(epoch FROM s.started_at - e.received_at)::float8 AS stepped"
        " FROM dispatch_decisions d"
        " JOIN events e ON e.workspace_id = d.workspace_id AND e.topic = d.event_topic"
        "  AND e.message_id = d.event_message_id"
        " JOIN runs r ON r.workspace_id = d.workspace_id AND r.id = d.run_id"
        " JOIN run_steps s ON s.run_id = r.id AND s.seq = 0 AND s.attempt = 1"
        " WHERE d.workflow_id = $1 AND d.decision = 'started'"
        " ORDER BY e.xid, e.seq",
        workflow_id,
    )
    return [(r["created"], r["claimed"], r["stepped"]) for r in rows]


@frozen
class Decisions:
    """What the dispatcher decided: (event, workflow) pairs by decision, and events.

    Attributes:
        by_decision: pairs by decision (``started``, ``not_matched``, ...).
        events: distinct events with at least one decision.
        events_started: distinct events that started at least one run.
    """

    by_decision: dict[str, int]
    events: int
    events_started: int

    @property
    def pairs(self) -> int:
        """Every decided (event, workflow) pair."""
        return sum(self.by_decision.values())


async def decisions(pool: asyncpg.Pool) -> Decisions:
    """The dispatcher's decisions so far."""
    rows = await pool.fetch("SELECT decision, count(*) AS n FROM dispatch_outcomes GROUP BY decision")
    row = await pool.fetchrow(
        "SELECT count(DISTINCT (event_topic, event_message_id)) AS events,"
        " count(DISTINCT (event_topic, event_message_id)) FILTER (WHERE decision = 'started') AS started"
        " FROM dispatch_outcomes"
    )
    assert row is not None
    return Decisions({r["decision"]: int(r["n"]) for r in rows}, int(row["events"]), int(row["started"]))


async def decision_batches(pool: asyncpg.Pool) -> list[tuple[datetime, int]]:
    """The dispatcher's transactions in order: when each began (its decisions' ``created_at``,
    the transaction's ``now()``) and how many events it decided."""
    rows = await pool.fetch(
        "SELECT created_at, count(DISTINCT (event_topic, event_message_id)) AS events"
        " FROM dispatch_outcomes GROUP BY created_at ORDER BY created_at"
    )
    return [(r["created_at"], int(r["events"])) for r in rows]


class EventHold:
    """Holds event delivery back: an open transaction that has an xid.

    Consumers read only events whose transaction is older than every running one
    (docs/event-log.md), so events published while this transaction is open wait for it.
    ``release`` commits it with a NOTIFY on the events channel: every held event becomes
    readable at once, and the consumers wake.
    """

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._conn: asyncpg.pool.PoolConnectionProxy | None = None
        self._transaction: asyncpg.transaction.Transaction | None = None

    async def __aenter__(self) -> EventHold:
        self._conn = await self._pool.acquire()
        self._transaction = self._conn.transaction()
        await self._transaction.start()
        await self._conn.fetchval("SELECT pg_current_xact_id()")  # takes the xid now
        return self

    async def release(self) -> datetime:
        """Commit; return the instant just before the commit (DB clock)."""
        assert self._conn is not None
        assert self._transaction is not None
        # clock_timestamp(), not now(): the events become readable when this commits.
        released: datetime = await self._conn.fetchval(
            f"SELECT clock_timestamp() FROM pg_notify('{EVENTS_CHANNEL}', '')"
        )
        await self._transaction.commit()
        self._transaction = None
        return released

    async def __aexit__(self, *_exc: object) -> None:
        assert self._conn is not None
        try:
            if self._transaction is not None:
                await self._transaction.rollback()
        finally:
            await self._pool.release(self._conn)


async def wait_until_consumed(pool: asyncpg.Pool, consumer: str, timeout: float, poll: float) -> datetime:
    """Poll until ``consumer``'s cursor has passed the last event of the log; return the
    database clock at the poll that saw it (at most ``poll`` seconds late).

    Raises:
        TimeoutError: it had not after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        row = await pool.fetchrow(
            "SELECT clock_timestamp() AS at, coalesce((SELECT (o.xid, o.seq) >= (e.xid, e.seq)"
            "   FROM consumer_offsets o WHERE o.consumer = $1), false) AS done"
            " FROM (SELECT xid, seq FROM events ORDER BY xid DESC, seq DESC LIMIT 1) e",
            consumer,
        )
        if row is not None and row["done"]:
            at: datetime = row["at"]
            return at
        if time.monotonic() > deadline:
            raise TimeoutError(f"consumer {consumer} had not read every event after {timeout:g}s")
        await asyncio.sleep(poll)


async def server_facts(pool: asyncpg.Pool) -> dict[str, str]:
    """The server's version and the settings that decide what a commit costs."""
    facts = {}
    for name in ("server_version", "fsync", "synchronous_commit", "wal_sync_method", "shared_buffers"):
        facts[name] = str(await pool.fetchval(f"SHOW {name}"))
    return facts


async def db_now(pool: asyncpg.Pool) -> datetime:
    """The database clock now."""
    value: datetime = await pool.fetchval("SELECT clock_timestamp()")
    return value
