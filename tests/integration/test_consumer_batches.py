"""An event consumer whose batches keep failing on a flaky link still makes progress.

Found by R3 (tests/fault/test_r3_storage_faults.py): a batch is one transaction of a few
statements per event, so with connections cut at a few percent of statements a big batch
almost never commits; the consumer backed off, more events piled up, the next batch was as
big, and the dispatcher stopped for good. It now halves its batch after each failure and
grows it back after each commit.
"""

from __future__ import annotations

import asyncio

import asyncpg

from agentflow.core.events import Event
from agentflow.engine import Engine
from agentflow.store import events
from agentflow.store.database import Connection


async def test_a_consumer_shrinks_a_batch_that_cannot_commit_until_it_can(engine: Engine) -> None:
    """A link that cannot carry more than three events per transaction: every event still
    arrives, once, in order, in batches of at most three once the consumer has adapted."""
    await engine.events.publish([{"topic": "flaky", "message_id": f"m{i}", "data": {}} for i in range(40)])
    seen: list[str] = []
    attempts: list[int] = []

    async def handler(conn: Connection, batch: list[Event]) -> None:
        attempts.append(len(batch))
        if len(batch) > 3:
            raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")
        seen.extend(e.message_id for e in batch)

    consumer = engine.events.consumer("flaky", handler, batch_size=64)
    consumer.poll_interval = 0.05
    task = asyncio.create_task(consumer.run())
    try:
        for _ in range(200):
            if len(seen) >= 40:
                break
            await asyncio.sleep(0.05)
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 10)
    assert seen == [f"m{i}" for i in range(40)]
    assert attempts[0] == 40 and min(attempts) <= 3


async def test_a_consumers_position_is_registered_once_and_held_by_one_instance(engine: Engine) -> None:
    """The first batch registers the consumer at the start of the log; while one instance
    holds the position, another gets none at once; afterwards it gets it."""
    pool = engine.db.pool
    async with pool.acquire() as first, first.transaction():
        assert await events.lock_position(first, "one.consumer", None) == events.Position(0, 0)
        await events.store_position(first, "one.consumer", events.Position(7, 3))
    async with pool.acquire() as again, again.transaction():
        assert await events.lock_position(again, "one.consumer", None) == events.Position(7, 3)
        async with pool.acquire() as other, other.transaction():
            assert await asyncio.wait_for(events.lock_position(other, "one.consumer", None), 5) is None
    assert await pool.fetchval("SELECT count(*) FROM consumer_offsets WHERE consumer = 'one.consumer'") == 1
