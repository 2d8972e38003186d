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
