"""R4: the event-log consumer against writers that commit late.

Writers publish thousands of events in short transactions while, twice, a "late" writer
inserts a block of events (taking low seq numbers) and holds its transaction open for
seconds before committing. The engine's consumer reads below the transaction horizon and
must see every event exactly once, in non-decreasing (xid, seq) order. The negative control,
a naive consumer that reads ``seq > last``, runs against the same writers at the same time
and must skip the late events.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
from typing import Any

import asyncpg
import pytest

from agentflow.core.events import Event
from agentflow.engine import Engine
from agentflow.store.database import Connection
from tests.fault.checks import print_verdict

pytestmark = pytest.mark.fault

WRITERS = 4
PER_WRITER = 800
LATE_BLOCK = 60
LATE_HOLD = 2.5


async def _writer(url: str, ws: Any, name: str, rng: random.Random) -> list[str]:
    conn = await asyncpg.connect(url)
    ids = []
    try:
        for batch in range(PER_WRITER // 8):
            mids = [f"{name}-{batch}-{i}" for i in range(8)]
            async with conn.transaction():
                await conn.executemany(
                    "INSERT INTO events (workspace_id, topic, message_id, published_at) VALUES ($1, 'r4', $2, now())",
                    [(ws, m) for m in mids],
                )
                if rng.random() < 0.1:
                    await asyncio.sleep(rng.uniform(0.0, 0.15))  # a commit that is a little late
            ids.extend(mids)
            await asyncio.sleep(0)
    finally:
        await conn.close()
    return ids


async def _late_writer(url: str, ws: Any, name: str, start_after: float) -> list[str]:
    await asyncio.sleep(start_after)
    conn = await asyncpg.connect(url)
    mids = [f"{name}-{i}" for i in range(LATE_BLOCK)]
    try:
        async with conn.transaction():
            await conn.executemany(
                "INSERT INTO events (workspace_id, topic, message_id, published_at) VALUES ($1, 'r4', $2, now())",
                [(ws, m) for m in mids],
            )
            await asyncio.sleep(LATE_HOLD)  # holds its low seq numbers, uncommitted, for seconds
    finally:
        await conn.close()
    return mids


async def _naive_consumer(pool: asyncpg.Pool, seen: list[str], stop: asyncio.Event) -> None:
    last = 0
    while not stop.is_set():
        rows = await pool.fetch(
            "SELECT seq, message_id FROM events WHERE seq > $1 ORDER BY seq LIMIT 200", last
        )
        for row in rows:
            seen.append(row["message_id"])
            last = row["seq"]
        if not rows:
            await asyncio.sleep(0.02)


@pytest.mark.timeout(120)
async def test_r4_consumer_never_skips_late_commits_and_the_naive_one_does(
    engine: Engine, database_url: str
) -> None:
    seed = int(os.environ.get("AGENTFLOW_R4_SEED", random.randrange(2**32)))
    print(f"\nR4 seed {seed}")
    rng = random.Random(seed)
    ws = await engine.db.pool.fetchval("SELECT id FROM workspaces")
    positions: list[tuple[int, int]] = []
    seen: list[str] = []

    async def handler(conn: Connection, batch: list[Event]) -> None:
        positions.extend((e.xid, e.seq) for e in batch)
        seen.extend(e.message_id for e in batch)

    consumer = engine.events.consumer("r4", handler, batch_size=200)
    consumer.poll_interval = 0.05
    naive_seen: list[str] = []
    stop_naive = asyncio.Event()
    consuming = asyncio.create_task(consumer.run())
    naive = asyncio.create_task(_naive_consumer(engine.db.pool, naive_seen, stop_naive))

    written = await asyncio.gather(
        *[_writer(database_url, ws, f"w{i}", random.Random(rng.random())) for i in range(WRITERS)],
        _late_writer(database_url, ws, "late-a", 0.2),
        _late_writer(database_url, ws, "late-b", 1.5),
    )
    published = [m for ids in written for m in ids]
    for _ in range(200):
        if len(seen) >= len(published):
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)  # let both consumers see anything still arriving
    consumer.stop()
    stop_naive.set()
    await asyncio.gather(consuming, naive)

    late = {m for m in published if m.startswith("late-")}
    verdict = {
        "seed": seed,
        "published": len(published),
        "consumer": {
            "lost": len(set(published) - set(seen)),
            "duplicated": len(seen) - len(set(seen)),
            "out_of_order": sum(1 for a, b in itertools.pairwise(positions) if b < a),
        },
        "naive_control": {
            "lost": len(set(published) - set(naive_seen)),
            "late_events_lost": len(late - set(naive_seen)),
        },
    }
    print_verdict("R4", verdict)
    assert len(published) == WRITERS * PER_WRITER + 2 * LATE_BLOCK
    assert verdict["consumer"] == {"lost": 0, "duplicated": 0, "out_of_order": 0}
    assert (await engine.events.lag("r4"))["events"] == 0
    # The negative control: the same checks catch a consumer that reads "seq > last".
    assert verdict["naive_control"]["late_events_lost"] > 0, (
        "the naive consumer should have skipped late commits"
    )
