"""The floor: what one commit costs on this database, measured before the workloads.

One ``INSERT ...`` in autocommit mode is one round trip that ends in a commit (a WAL
flush unless the server disables it): the least work any durable step can do. Workload
figures are reported as ratios to it.

The floor's commits go back to back. A worker spends CPU between a run's commits (a step's
Python), and on some machines a WAL flush costs more the longer the disk sat idle since the
last one (on this project's 2-core VM: 0.07 ms back to back, about 0.22 ms after 100 µs,
about 0.5 ms after 300 µs; benchmarks/README.md, "What a commit costs after a step's CPU"). The
floor is therefore also measured **paced**: each commit after a fixed spell of CPU work in
the client (``PACED_CPU_US``), as a reference for the one-at-a-time workloads; the ratios
stay to the back-to-back floor.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
from asyncpg.prepared_stmt import PreparedStatement

from agentflow.bench.stats import Summary
from agentflow.core.frozen import frozen

PACED_CPU_US = (25, 100, 300)
"""Microseconds of CPU the client spends before each paced commit: about what a worker spends
between a run's commits for a trivial step (0.1 ms) and for an agent step (0.3 ms)."""


@frozen
class Floor:
    """Sequential round trips on one connection (milliseconds).

    Attributes:
        commit: ``INSERT INTO bench_floor ...`` in autocommit (INSERT + COMMIT).
        commits_per_s: ``n`` commits divided by the time they took, back to back.
        select: ``SELECT 1`` (a round trip without a commit), for comparison.
        paced: the same commit, each after the client spent that many microseconds of CPU
            (``PACED_CPU_US``), in that order.
    """

    commit: Summary
    commits_per_s: float
    select: Summary
    paced: tuple[tuple[int, Summary], ...] = ()

    def paced_p50(self, cpu_us: int) -> float:
        """The p50 of the commits paced by ``cpu_us`` microseconds of CPU (ms)."""
        return dict(self.paced)[cpu_us].p50

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
            "paced_commit_p50_ms": {str(us): summary.p50 for us, summary in self.paced},
        }


async def measure_floor(url: str, n: int) -> Floor:
    """Time ``n`` sequential commits and ``n`` ``SELECT 1`` on a new connection, then
    ``n // 4`` commits (at least 50) paced by each of ``PACED_CPU_US``."""
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
        paced = [(us, await _paced_commits(insert, max(n // 4, 50), us)) for us in PACED_CPU_US]
        await conn.execute("DROP TABLE bench_floor")
    finally:
        await conn.close()
    return Floor(
        Summary.of(commits).scaled(1000), n / elapsed, Summary.of(selects).scaled(1000), tuple(paced)
    )


async def _paced_commits(insert: PreparedStatement, n: int, cpu_us: int) -> Summary:
    """``n`` executions of ``insert``, each after ``cpu_us`` microseconds of busy CPU here (ms)."""
    commits: list[float] = []
    for i in range(n):
        spend_cpu(cpu_us / 1e6)
        t0 = time.perf_counter()
        await insert.fetch(f'{{"paced": {i}}}')
        commits.append(time.perf_counter() - t0)
    return Summary.of(commits).scaled(1000)


def spend_cpu(seconds: float) -> None:
    """Keep this thread busy for ``seconds`` (a spin: the CPU works, as a worker's step does)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


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
