"""The benchmark's own SQL: setting runs due together, and reading DB-clock timestamps.

These statements exist only to measure the engine (they read the engine's tables, and
W1 moves ``due_at`` of runs no worker has seen yet), so they live here rather than in
``agentflow.store``. Every time is the database clock: ``runs.created_at`` is the start
run's ``now()``, ``runs.started_at`` the first claim's ``now()``, ``run_steps.started_at``
the checkpoint's ``clock_timestamp()`` minus the step's measured duration, and
``run_steps.finished_at`` the checkpoint's ``clock_timestamp()``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import asyncpg

from agentflow.store.database import WAKE_CHANNEL

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
    pool: asyncpg.Pool, workflow_id: UUID, count: int, timeout: float, poll: float = 0.1
) -> dict[str, int]:
    """Poll until ``count`` runs of the workflow have ended; return runs by status.

    Raises:
        TimeoutError: they had not all ended after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        rows = await pool.fetch(
            "SELECT status, count(*) AS n FROM runs WHERE workflow_id = $1 GROUP BY status",
            workflow_id,
        )
        by_status = {r["status"]: int(r["n"]) for r in rows}
        if sum(n for s, n in by_status.items() if s in TERMINAL) >= count:
            return by_status
        if time.monotonic() > deadline:
            raise TimeoutError(f"runs still active after {timeout:g}s: {by_status}")
        await asyncio.sleep(poll)


@dataclass(frozen=True)
class Span:
    """When a workflow's runs were created, first claimed and last completed (DB clock)."""

    first_created: datetime
    first_claimed: datetime
    last_completed: datetime
    completed: int

    def seconds_since(self, start: datetime) -> float:
        """Seconds from ``start`` to the last completion."""
        return (self.last_completed - start).total_seconds()


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
