"""What a commit costs after the client worked: INSERT+COMMIT paced by CPU between commits.

    python benchmarks/paced_commits.py
    AGENTFLOW_DATABASE_URL=postgresql://postgres@127.0.0.1/postgres python benchmarks/paced_commits.py

`agentflow bench`'s floor commits back to back. A worker runs a step's Python between a run's
commits, and on some machines the WAL flush costs more the longer the disk sat idle since the
previous one. This times, on one connection with a prepared statement, blocks of commits each
made after spinning the CPU here for a given number of microseconds, for three tables:

- a logged table (the floor's commit: a WAL flush each);
- the same with ``synchronous_commit = off`` for this connection only: no flush waited for
  (a diagnosis: the engine never does this);
- an UNLOGGED table: no WAL at all.

If only the first grows with the CPU between commits, the flush is what grows; a ``SELECT 1``
paced the same way shows the backend's wake-up alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import asyncpg
from asyncpg.prepared_stmt import PreparedStatement

from agentflow.bench.database import bench_server
from agentflow.bench.floor import spend_cpu

CPU_US = (0, 25, 50, 100, 150, 200, 300, 500, 1000)


async def _block(statement: PreparedStatement, n: int, cpu_us: int) -> float:
    """p50 in ms of ``n`` executions, each after ``cpu_us`` µs of CPU."""
    times: list[float] = []
    for i in range(n):
        spend_cpu(cpu_us / 1e6)
        began = time.perf_counter()
        await (
            statement.fetchval() if "SELECT" in statement.get_query() else statement.fetch(f'{{"i": {i}}}')
        )
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


async def measure(url: str, n: int) -> None:
    conn: asyncpg.Connection = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TABLE paced_logged (id bigserial PRIMARY KEY, v jsonb NOT NULL)")
        await conn.execute(
            "CREATE UNLOGGED TABLE paced_unlogged (id bigserial PRIMARY KEY, v jsonb NOT NULL)"
        )
        logged = await conn.prepare("INSERT INTO paced_logged (v) VALUES ($1::jsonb)")
        unlogged = await conn.prepare("INSERT INTO paced_unlogged (v) VALUES ($1::jsonb)")
        select = await conn.prepare("SELECT 1")
        rows: dict[str, list[float]] = {}
        for label, statement, flush in (
            ("INSERT+COMMIT (the floor's)", logged, "on"),
            ("the same, synchronous_commit off", logged, "off"),
            ("INSERT+COMMIT, UNLOGGED table", unlogged, "on"),
            ("SELECT 1", select, "on"),
        ):
            await conn.execute(f"SET synchronous_commit = {flush}")
            for _ in range(50):  # warm up
                await _block(statement, 1, 0)
            rows[label] = [await _block(statement, n, us) for us in CPU_US]
        await conn.execute("RESET synchronous_commit")
        await conn.execute("DROP TABLE paced_logged, paced_unlogged")
    finally:
        await conn.close()
    print("p50 ms by µs of CPU spent before each statement")
    print(f"{'':34s}" + "".join(f"{us:>8d}" for us in CPU_US))
    for label, values in rows.items():
        print(f"{label:34s}" + "".join(f"{v:8.3f}" for v in values))


async def main(n: int) -> None:
    async with bench_server(os.environ.get("AGENTFLOW_DATABASE_URL")) as server, server.database() as url:
        await measure(url, n)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=500, help="statements per block")
    asyncio.run(main(parser.parse_args().n))
