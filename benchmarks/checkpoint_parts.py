"""What a checkpoint statement costs by itself: round trips on one prepared connection.

    python benchmarks/checkpoint_parts.py --n 3000

W2, G1, L1 and A1 measure a whole step (the worker's Python, its pool, the commit group and
the checkpoint). This takes the worker away: on one connection with prepared statements, as
the floor is measured, it times in turn (interleaved, so a slow moment of the machine hits
every variant alike) the floor's INSERT+COMMIT, the engine's checkpoint of a trivial step,
the checkpoint of a step that called a model (its tokens on the step, the run and the
workspace's day), the checkpoint of a graph step whose state holds timers (their times
stamped by the database), and the checkpoint's two writes alone: the fenced update of the run
and the insert of the step's row. It prints each p50 and its ratio to the floor: the least a
step of each kind can cost on this database, whatever the worker does around it.

Last, a design that is not the engine's: a step written as its row alone, fenced by a share
lock on its run (``FOR SHARE``: a claim that moves the lease waits for it, or it sees the
new token and writes nothing), with the run's row left as it was. It measures what a
checkpoint that writes one row instead of two would cost (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any
from uuid import UUID

import asyncpg

from agentflow.bench.context import chain, publish
from agentflow.bench.database import bench_server
from agentflow.engine import Engine
from agentflow.settings import Settings
from agentflow.store.checkpoints import _statement
from agentflow.store.database import _init_connection

TOKEN, OWNER = 7, "checkpoint-parts"
STATE = {"node": "s1", "vars": {}}
TIMED = {"node": "s1", "vars": {}, "timers": [{"from": "nap", "to": "s2", "secs": 60}]}


class Run:
    """A run held by this script: its id and its next step number."""

    def __init__(self, run_id: UUID) -> None:
        self.id = run_id
        self.seq = 0

    def next(self) -> int:
        """This run's next step number."""
        self.seq += 1
        return self.seq

    def fixed(self, workspace: UUID, kind: str, state: dict[str, Any] = STATE) -> list[Any]:
        """The checkpoint's 25 fixed parameters for this run's next step (a completed step)."""
        s = self.seq
        self.seq += 1
        return [
            workspace, self.id, TOKEN, OWNER, "in_progress", None, state, None, None, 1, None, None,
            s, 1, f"s{s}", kind, "noop", "completed", {"a": 1}, {"ok": True}, None, 0.00002, 0, s, s + 1,
        ]  # fmt: skip


async def measure(url: str, n: int) -> dict[str, list[float]]:
    """The round trips of each variant, ``n`` each, interleaved."""
    async with Engine.open(Settings(database_url=url), migrate_schema=False) as engine:
        workflow = await publish(engine, chain("checkpoint_parts", 3))
        runs = [Run((await engine.start_run(workflow)).id) for _ in range(6)]
        pool = engine.db.pool
        workspace = await pool.fetchval("SELECT workspace_id FROM runs LIMIT 1")
        await pool.execute(
            "UPDATE runs SET status = 'in_progress', lease_owner = $1, fencing_token = $2, step_seq = 0,"
            " due_at = now() + interval '1 hour', lease_expires_at = now() + interval '1 hour'",
            OWNER,
            TOKEN,
        )
    conn: asyncpg.Connection = await asyncpg.connect(url)
    try:
        await _init_connection(conn)  # the engine's JSON codecs
        await conn.execute("CREATE TABLE bench_floor (id bigserial PRIMARY KEY, v jsonb NOT NULL)")
        floor = await conn.prepare("INSERT INTO bench_floor (v) VALUES ($1::jsonb)")
        plain = await conn.prepare(_statement(timers=False))
        usage = await conn.prepare(_statement(frozenset(), True, timers=False))
        timed = await conn.prepare(_statement())
        one_write = await conn.prepare(
            "INSERT INTO run_steps (workspace_id, run_id, seq, attempt, node_id, kind, name, status, input,"
            " output, idempotency_key, worker, fencing_token, started_at, finished_at, state)"
            " SELECT $1::uuid, $2::uuid, $3::int, 1, 'n', 'tool', 'noop', 'completed', $4, $5,"
            " $2::uuid::text || ':' || $3::int, $6, $7,"
            " now(), now(), $8 FROM runs WHERE workspace_id = $1 AND id = $2 AND fencing_token = $7"
            " AND lease_owner = $6 FOR SHARE"
        )
        update = await conn.prepare(
            "UPDATE runs SET state = $3, step_seq = step_seq + 1, updated_at = now()"
            " WHERE workspace_id = $1 AND id = $2 AND fencing_token = $4"
        )
        insert = await conn.prepare(
            "INSERT INTO run_steps (workspace_id, run_id, seq, attempt, node_id, kind, name, status, input,"
            " output, idempotency_key, worker, fencing_token, started_at, finished_at)"
            " VALUES ($1, $2, $3, 1, 'n', 'tool', 'noop', 'failed', $4, $5, 'k', $6, $7, now(), now())"
        )
        spent = ["scripted", 12, 30, 0, Decimal("0.000010"), 1]
        variants: dict[str, Callable[[], Awaitable[Any]]] = {
            "floor: INSERT+COMMIT": lambda: floor.fetch('{"i": 1}'),
            "checkpoint, trivial step": lambda: plain.fetchrow(*runs[0].fixed(workspace, "tool")),
            "checkpoint, model call": lambda: usage.fetchrow(*runs[1].fixed(workspace, "llm"), *spent),
            "checkpoint, state with timers": lambda: timed.fetchrow(*runs[4].fixed(workspace, "wait", TIMED)),
            "its update of the run alone": lambda: update.fetch(workspace, runs[2].id, STATE, TOKEN),
            "its step insert alone": lambda: insert.fetch(
                workspace, runs[3].id, runs[3].seq, {"a": 1}, {"ok": True}, OWNER, TOKEN
            ),
            "one write: the step, run share-locked": lambda: one_write.fetch(
                workspace, runs[5].id, runs[5].next(), {"a": 1}, {"ok": True}, OWNER, TOKEN, STATE
            ),
        }
        for call in variants.values():  # warm up: plans cached, pages in memory
            for _ in range(50):
                await call()
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(n):
            for name, call in variants.items():
                began = time.perf_counter()
                await call()
                times[name].append(time.perf_counter() - began)
        return times
    finally:
        await conn.close()


async def main(n: int) -> None:
    async with bench_server(None) as server, server.database() as url:
        times = await measure(url, n)
    floor = statistics.median(times["floor: INSERT+COMMIT"])
    for name, samples in times.items():
        p50 = statistics.median(samples)
        print(f"{name:40s} p50 {p50 * 1000:.3f} ms  {p50 / floor:.2f}x floor")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=3000, help="round trips per variant")
    asyncio.run(main(parser.parse_args().n))
