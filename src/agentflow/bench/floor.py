"""The floor: what one commit costs on this database, measured before the workloads.

One ``INSERT ...`` in autocommit mode is one round trip that ends in a commit (a WAL
flush unless the server disables it): the least work any durable step can do. Workload
figures are reported as ratios to it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg

from agentflow.bench.stats import Summary
from agentflow.core.frozen import frozen


@frozen
class Floor:
    """Sequential round trips on one connection (milliseconds).

    Attributes:
        commit: ``INSERT INTO bench_floor ...`` in autocommit (INSERT + COMMIT).
        commits_per_s: ``n`` commits divided by the time they took, back to back.
        select: ``SELECT 1`` (a round trip without a commit), for comparison.
    """

    commit: Summary
    commits_per_s: float
    select: Summary

    def runs_per_s(self, commits_per_run: int) -> float:
        """Runs per second one connection could commit at the floor's p50."""
        return 1000.0 / (self.commit.p50 * commits_per_run)

    def to_json(self) -> dict[str, Any]:
        """The floor figures for the JSON document."""
        return {
            "n": self.commit.n,
            "commit_p50_ms": self.commit.p50,
            "commit_p99_ms": self.commit.p99,
            "commit_mean_ms": self.commit.mean,
            "commits_per_s": self.commits_per_s,
            "select1_p50_ms": self.select.p50,
            "select1_p99_ms": self.select.p99,
        }


async def measure_floor(url: str, n: int) -> Floor:
    """Time ``n`` sequential commits and ``n`` ``SELECT 1`` on a new connection."""
    conn: asyncpg.Connection = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, v jsonb NOT NULL)"
        )
        insert = await conn.prepare("INSERT INTO bench_floor (v) VALUES ($1::jsonb)")
        select = await conn.prepare("SELECT 1")
        for _ in range(min(n, 50)):  # warm up the connection and the table
            await insert.fetch('{"warm": true}')
        commits: list[float] = []
        began = time.perf_counter()
        for i in range(n):
            t0 = time.perf_counter()
            await insert.fetch(f'{{"i": {i}}}')
            commits.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - began
        selects: list[float] = []
        for _ in range(n):
            t0 = time.perf_counter()
            await select.fetchval()
            selects.append(time.perf_counter() - t0)
        await conn.execute("DROP TABLE bench_floor")
    finally:
        await conn.close()
    return Floor(Summary.of(commits).scaled(1000), n / elapsed, Summary.of(selects).scaled(1000))


async def measure_idle_commits(url: str, n: int, idle: float) -> Summary:
    """Time ``n`` commits like the floor's, each after ``idle`` seconds of doing nothing.

    What a commit costs a process that was asleep, as W3's starts and claims are: on a
    virtual machine the idle CPUs must wake first (milliseconds, not microseconds).
    """
    conn: asyncpg.Connection = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_idle (id bigserial PRIMARY KEY, v jsonb NOT NULL)"
        )
        insert = await conn.prepare("INSERT INTO bench_idle (v) VALUES ($1::jsonb)")
        for _ in range(min(n, 20)):
            await insert.fetch('{"warm": true}')
        commits: list[float] = []
        for i in range(n):
            await asyncio.sleep(idle)
            t0 = time.perf_counter()
            await insert.fetch(f'{{"i": {i}}}')
            commits.append(time.perf_counter() - t0)
        await conn.execute("DROP TABLE bench_idle")
    finally:
        await conn.close()
    return Summary.of(commits).scaled(1000)
