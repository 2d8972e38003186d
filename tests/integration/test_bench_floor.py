"""The bench's floor: back-to-back commits, and the same commits paced by CPU spent between them."""

from __future__ import annotations

import time

import asyncpg

from agentflow.bench.floor import PACED_CPU_US, measure_floor, spend_cpu


async def test_the_floor_also_times_commits_paced_by_cpu(database_url: str) -> None:
    floor = await measure_floor(database_url, 40)

    assert [cpu_us for cpu_us, _ in floor.paced] == list(PACED_CPU_US)
    for cpu_us, summary in floor.paced:
        assert summary.n == 50, "n // 4 commits, at least 50"
        assert summary.p50 > 0 and summary.max >= summary.p50
        assert floor.paced_p50(cpu_us) == summary.p50
    assert floor.to_json()["paced_commit_p50_ms"] == {str(us): s.p50 for us, s in floor.paced}
    # It leaves nothing behind in the database it measured.
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT to_regclass('bench_floor')") is None
    finally:
        await conn.close()


def test_spending_cpu_keeps_the_cpu_busy_for_that_long() -> None:
    began_wall, began_cpu = time.perf_counter(), time.thread_time()
    spend_cpu(0.05)
    wall, cpu = time.perf_counter() - began_wall, time.thread_time() - began_cpu
    assert wall >= 0.05
    # A sleep would use no CPU; a spin uses what the machine gives it (a tenth even when loaded).
    assert cpu >= 0.1 * wall, (cpu, wall)
