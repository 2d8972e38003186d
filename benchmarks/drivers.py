"""Compare asyncpg and psycopg 3 (async) on the embedded PostgreSQL server.

For each driver: median latency and client CPU per operation of ``SELECT $1``, an
``INSERT`` in autocommit (INSERT + COMMIT), fetching 100 rows, and inserts from 16 tasks
sharing a 16-connection pool (asyncpg's pool with a no-op ``reset=``, as the engine uses
it). Client CPU is this process's CPU time (``time.process_time``) divided by the
operations; it is what a worker spends in the driver, the rest of the latency is the
server and the socket.

Usage:
    python benchmarks/drivers.py [--n 8000] [--repeat 3]

With ``--repeat``, each cell shows the range over the repetitions.

psycopg is not a dependency of agentflow; without it the script says how to install it
(``pip install 'psycopg[binary,pool]'``) and exits 0. Set AGENTFLOW_DATABASE_URL to run
against another server (the script creates and drops a table ``bench_drivers`` there).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

CONCURRENT_TASKS = 16
SETUP = """
DROP TABLE IF EXISTS bench_drivers;
CREATE TABLE bench_drivers (id bigserial PRIMARY KEY, name text NOT NULL, v jsonb NOT NULL,
                            at timestamptz NOT NULL DEFAULT now());
INSERT INTO bench_drivers (name, v)
    SELECT 'row ' || i, jsonb_build_object('i', i, 'tags', jsonb_build_array('a', 'b'))
    FROM generate_series(1, 100) AS i;
"""
INSERT = "INSERT INTO bench_drivers (name, v) VALUES ($1, $2::jsonb)"
FETCH = "SELECT id, name, v, at FROM bench_drivers ORDER BY id LIMIT 100"

Op = Callable[[int], Awaitable[Any]]


async def timed(op: Op, n: int) -> tuple[float, float]:
    """Median latency (ms) and client CPU per op (µs) of ``n`` sequential calls."""
    for i in range(min(n, 100)):  # warm up: prepared statements, caches
        await op(i)
    latencies = []
    cpu0 = time.process_time()
    for i in range(n):
        t0 = time.perf_counter()
        await op(i)
        latencies.append(time.perf_counter() - t0)
    cpu = time.process_time() - cpu0
    return statistics.median(latencies) * 1000, cpu / n * 1e6


async def concurrent(op: Op, n: int) -> tuple[float, float]:
    """Operations per second and client CPU per op (µs) of ``n`` ops from 16 tasks."""
    counter = iter(range(n))

    async def task() -> None:
        for i in counter:
            await op(i)

    await asyncio.gather(*(op(i) for i in range(CONCURRENT_TASKS)))  # warm every connection
    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(task() for _ in range(CONCURRENT_TASKS)))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return n / elapsed, cpu / n * 1e6


async def _no_reset(_conn: asyncpg.Connection) -> None:
    return None


async def bench_asyncpg(url: str, n: int) -> dict[str, tuple[float, float]]:
    """The four measurements with asyncpg."""
    conn = await asyncpg.connect(url)
    await conn.execute(SETUP)
    results = {
        "SELECT $1": await timed(lambda i: conn.fetchval("SELECT $1::int", i), n),
        "INSERT+COMMIT": await timed(lambda i: conn.execute(INSERT, f"n{i}", '{"a": 1}'), n),
        "fetch 100 rows": await timed(lambda _i: conn.fetch(FETCH), n),
    }
    await conn.close()
    pool = await asyncpg.create_pool(
        url, min_size=CONCURRENT_TASKS, max_size=CONCURRENT_TASKS, reset=_no_reset
    )
    results["16 tasks, pool of 16: INSERT+COMMIT"] = await concurrent(
        lambda i: pool.execute(INSERT, f"c{i}", '{"a": 1}'), n * 2
    )
    await pool.close()
    return results


async def bench_psycopg(url: str, n: int) -> dict[str, tuple[float, float]]:
    """The four measurements with psycopg 3 (async, autocommit, auto-prepared)."""
    import psycopg
    from psycopg_pool import AsyncConnectionPool

    insert = INSERT.replace("$1", "%s").replace("$2", "%s")
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)

    async def select1(i: int) -> Any:
        cur = await conn.execute("SELECT %s::int", (i,))
        return await cur.fetchone()

    async def fetch(_i: int) -> Any:
        cur = await conn.execute(FETCH)
        return await cur.fetchall()

    results = {
        "SELECT $1": await timed(select1, n),
        "INSERT+COMMIT": await timed(lambda i: conn.execute(insert, (f"n{i}", '{"a": 1}')), n),
        "fetch 100 rows": await timed(fetch, n),
    }
    await conn.close()
    pool = AsyncConnectionPool(
        url, min_size=CONCURRENT_TASKS, max_size=CONCURRENT_TASKS, kwargs={"autocommit": True}, open=False
    )
    await pool.open(wait=True)

    async def pooled_insert(i: int) -> None:
        async with pool.connection() as c:
            await c.execute(insert, (f"c{i}", '{"a": 1}'))

    results["16 tasks, pool of 16: INSERT+COMMIT"] = await concurrent(pooled_insert, n * 2)
    await pool.close()
    return results


def print_table(rows: dict[str, list[dict[str, tuple[float, float]]]]) -> None:
    """One line per measurement, the drivers side by side (ranges over repetitions)."""
    drivers = list(rows)
    header = f"{'measurement':38}" + "".join(f"{d:>38}" for d in drivers)
    print(header)
    print("-" * len(header))
    for name in rows[drivers[0]][0]:
        cells = []
        for driver in drivers:
            values = [rep[name][0] for rep in rows[driver]]
            cpus = [rep[name][1] for rep in rows[driver]]
            concurrent_row = name.startswith("16 tasks")
            fmt = "{:,.0f}" if concurrent_row else "{:.3f}"
            shown = _span(values, fmt) + (" ops/s" if concurrent_row else " ms")
            cells.append(f"{shown}, {_span(cpus, '{:.0f}')} µs CPU/op")
        print(f"{name:38}" + "".join(f"{c:>38}" for c in cells))


def _span(values: list[float], fmt: str) -> str:
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low}-{high}"


async def main(n: int, repeat: int) -> None:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        print("psycopg 3 is not installed; to compare it with asyncpg run:")
        print("    pip install 'psycopg[binary,pool]'")
        return
    url = os.environ.get("AGENTFLOW_DATABASE_URL")
    server = None
    if not url:
        from agentflow.store.embedded import EmbeddedServer

        server = EmbeddedServer(Path(tempfile.mkdtemp(prefix="agentflow-drivers-")))
        url = server.url()
    try:
        results: dict[str, list[dict[str, tuple[float, float]]]] = {"asyncpg": [], "psycopg 3 (async)": []}
        for _ in range(repeat):
            results["asyncpg"].append(await bench_asyncpg(url, n))
            results["psycopg 3 (async)"].append(await bench_psycopg(url, n))
        conn = await asyncpg.connect(url)
        version = await conn.fetchval("SHOW server_version")
        await conn.execute("DROP TABLE IF EXISTS bench_drivers")
        await conn.close()
    finally:
        if server is not None:
            server.stop()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"PostgreSQL {version}, medians of {n} operations, {repeat} repetition(s),"
        f" {os.cpu_count()} CPUs, load average {load}\n"
    )
    print_table(results)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=8000, help="operations per measurement")
    parser.add_argument("--repeat", type=int, default=1, help="repeat every measurement this many times")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.repeat))
    sys.exit(0)
