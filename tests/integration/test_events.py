"""The event log: idempotent publishing, ordered consumption with atomic cursors, lag, retention."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from agentflow.core.errors import ConfigError
from agentflow.core.events import Event
from agentflow.engine import Engine
from agentflow.store.database import Connection
from tests.conftest import make_settings


async def test_publishing_is_idempotent_per_topic_and_message_id(engine: Engine) -> None:
    first = await engine.events.publish([{"topic": "email.received", "message_id": "m-1", "data": {"n": 1}}])
    again = await engine.events.publish(
        [
            {"topic": "email.received", "message_id": "m-1", "data": {"n": 999}},
            {"topic": "ticket.opened", "message_id": "m-1", "data": {"n": 2}},
        ]
    )
    assert first[0].created and not again[0].created and again[1].created
    assert again[0].event == first[0].event, "re-publishing returns the original, unchanged"
    assert again[0].event.data == {"n": 1}
    count = await engine.db.pool.fetchval("SELECT count(*) FROM events")
    assert count == 2


async def test_duplicates_inside_one_batch_and_generated_ids(engine: Engine) -> None:
    result = await engine.events.publish(
        [
            {"topic": "note.added", "message_id": "dup", "data": {"v": 1}},
            {"topic": "note.added", "message_id": "dup", "data": {"v": 2}},
            {"topic": "note.added", "data": {"v": 3}},
            {"topic": "note.added", "data": {"v": 4}},
        ]
    )
    assert result[0].event == result[1].event
    generated = [result[2].event.message_id, result[3].event.message_id]
    assert all(UUID(m).version == 7 for m in generated)
    assert generated[0] != generated[1]
    assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 3


async def test_bad_events_are_refused_with_paths_and_nothing_is_stored(engine: Engine) -> None:
    with pytest.raises(ConfigError) as info:
        await engine.events.publish(
            [{"topic": "ok", "data": {}}, {"topic": "bad topic!", "data": [], "message_id": ""}]
        )
    paths = {e["path"] for e in info.value.info.details["errors"]}
    assert paths == {"events[1].topic", "events[1].data", "events[1].message_id"}
    with pytest.raises(ConfigError) as naive:
        await engine.events.publish([{"topic": "t", "published_at": "2026-01-01T00:00:00"}])
    assert "published_at" in naive.value.info.details["errors"][0]["path"]
    with pytest.raises(ConfigError) as big:
        await engine.events.publish([{"topic": "t"}] * 1001)
    assert big.value.code == "batch_too_large"
    assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 0


async def test_what_changed_for_an_account(engine: Engine) -> None:
    now = datetime.now(UTC)
    await engine.events.publish(
        [
            {
                "topic": "email.received",
                "data": {"account_id": "acme"},
                "published_at": now - timedelta(minutes=5),
            },
            {"topic": "ticket.opened", "account_id": "acme", "published_at": now - timedelta(minutes=1)},
            {
                "topic": "email.received",
                "data": {"account_id": "acme"},
                "published_at": now - timedelta(hours=5),
            },
            {"topic": "email.received", "data": {"account_id": "globex"}},
        ]
    )
    recent = await engine.events.for_account("acme", since_seconds=3600)
    assert [e.topic for e in recent] == ["ticket.opened", "email.received"]


async def test_consumer_sees_every_event_once_in_order_with_effects_and_cursor_atomic(engine: Engine) -> None:
    await engine.events.publish([{"topic": "t", "message_id": f"e{i}", "data": {"i": i}} for i in range(25)])
    seen: list[int] = []
    failures = {"left": 1}

    async def handler(conn: Connection, batch: list[Event]) -> None:
        for event in batch:
            await conn.execute(
                "INSERT INTO tasks (workspace_id, id, title, origin_key) VALUES ($1, gen_random_uuid(), $2, $3)",
                event.workspace_id,
                f"from {event.message_id}",
                f"event:{event.message_id}",
            )
        if batch[0].data["i"] == 10 and failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("handler crashed mid-batch")
        seen.extend(e.data["i"] for e in batch)

    consumer = engine.events.consumer("test-consumer", handler, batch_size=10)
    assert await consumer.consume_batch() == 10
    with pytest.raises(RuntimeError):
        await consumer.consume_batch()
    assert await engine.db.pool.fetchval("SELECT count(*) FROM tasks") == 10, (
        "the failed batch's effects stayed"
    )
    assert (await engine.events.lag("test-consumer"))["events"] == 15
    assert await consumer.consume_batch() == 10, "the failed batch is delivered again"
    assert await consumer.consume_batch() == 5
    assert await consumer.consume_batch() == 0
    assert seen == list(range(25))
    assert await engine.db.pool.fetchval("SELECT count(*) FROM tasks") == 25
    assert (await engine.events.lag("test-consumer"))["events"] == 0


async def test_two_instances_of_a_consumer_never_share_a_batch(engine: Engine) -> None:
    await engine.events.publish([{"topic": "t", "message_id": f"e{i}"} for i in range(300)])
    seen: list[str] = []

    async def slow(conn: Connection, batch: list[Event]) -> None:
        await asyncio.sleep(0.02)
        seen.extend(e.message_id for e in batch)

    a = engine.events.consumer("shared", slow, batch_size=7)
    b = engine.events.consumer("shared", slow, batch_size=7)

    async def drain(c: object) -> None:
        # The instance that finds the cursor locked gets 0 at once: keep going until done.
        deadline = asyncio.get_running_loop().time() + 30
        while len(seen) < 300 and asyncio.get_running_loop().time() < deadline:
            if not await c.consume_batch():  # type: ignore[attr-defined]
                await asyncio.sleep(0.005)

    await asyncio.gather(drain(a), drain(b))
    assert len(seen) == len(set(seen)), "an event was processed twice"
    assert sorted(seen) == sorted(f"e{i}" for i in range(300)), "an event was lost"


async def test_running_consumer_wakes_on_publish(engine: Engine) -> None:
    got: list[str] = []
    arrived = asyncio.Event()

    async def handler(conn: Connection, batch: list[Event]) -> None:
        got.extend(e.message_id for e in batch)
        arrived.set()

    consumer = engine.events.consumer("waker", handler)
    consumer.poll_interval = 30  # only NOTIFY can wake it in time
    task = asyncio.create_task(consumer.run())
    await asyncio.sleep(0.3)
    await engine.events.publish([{"topic": "ping", "message_id": "p1"}])
    await asyncio.wait_for(arrived.wait(), 5)
    consumer.stop()
    await task
    assert got == ["p1"]


async def test_prune_keeps_what_a_consumer_still_needs(engine: Engine) -> None:
    await engine.events.publish([{"topic": "old", "message_id": f"o{i}"} for i in range(6)])
    await engine.db.pool.execute("UPDATE events SET received_at = now() - interval '2 days'")

    async def nothing(conn: Connection, batch: list[Event]) -> None:
        return None

    consumer = engine.events.consumer("pruner-test", nothing, batch_size=4)
    await consumer.consume_batch()  # 4 of 6 consumed
    assert await engine.events.prune(older_than_seconds=86400) == (4, 0)
    remaining = await engine.db.pool.fetch("SELECT message_id FROM events ORDER BY seq")
    assert [r["message_id"] for r in remaining] == ["o4", "o5"]
    assert await engine.events.prune(older_than_seconds=86400) == (0, 0)


async def test_prune_drops_old_decisions_but_not_pending_ones(engine: Engine) -> None:
    workflow = await engine.publish_workflow(
        {"name": "w", "kind": "structured", "nodes": [{"id": "f", "type": "finish"}]}
    )
    rows = [("done", "started", None), ("gate", "gate_pending", None), ("window", "debounced", None)]
    for message_id, decision, run_id in rows:
        await engine.db.pool.execute(
            "INSERT INTO dispatch_decisions (workspace_id, workflow_id, event_topic, event_message_id, decision,"
            " run_id, created_at) VALUES ($1, $2, 't', $3, $4, $5, now() - interval '2 days')",
            workflow.workflow.workspace_id, workflow.workflow.id, message_id, decision, run_id,
        )  # fmt: skip
    await engine.db.pool.execute(
        "INSERT INTO dispatch_decisions (workspace_id, workflow_id, event_topic, event_message_id, decision)"
        " VALUES ($1, $2, 't', 'fresh', 'not_matched')",
        workflow.workflow.workspace_id,
        workflow.workflow.id,
    )
    assert await engine.events.prune(older_than_seconds=86400) == (0, 1)
    left = await engine.db.pool.fetch(
        "SELECT event_message_id FROM dispatch_decisions ORDER BY event_message_id"
    )
    assert [r["event_message_id"] for r in left] == ["fresh", "gate", "window"]


async def test_workers_apply_retention_from_settings(database_url: str) -> None:
    settings = make_settings(database_url, event_retention_hours=24)
    async with Engine.open(settings, migrate_schema=False) as engine:
        await engine.events.publish([{"topic": "old", "message_id": f"o{i}"} for i in range(3)])
        await engine.events.publish([{"topic": "new", "message_id": "n"}])
        # Every consumer has read them (the dispatcher's cursor passes them), the old ones are 2 days old.
        worker = engine.worker()
        task = asyncio.create_task(worker.run())
        try:
            for _ in range(100):
                await asyncio.sleep(0.05)
                if await engine.db.pool.fetchval("SELECT count(*) FROM consumer_offsets") == 1:
                    break
            await engine.db.pool.execute(
                "UPDATE events SET received_at = now() - interval '2 days' WHERE topic = 'old'"
            )
        finally:
            worker.stop()
            await task
        worker = engine.worker()  # a new worker prunes at start
        task = asyncio.create_task(worker.run())
        try:
            for _ in range(100):
                await asyncio.sleep(0.05)
                if await engine.db.pool.fetchval("SELECT count(*) FROM events") == 1:
                    break
        finally:
            worker.stop()
            await task
        left = await engine.db.pool.fetch("SELECT message_id FROM events")
        assert [r["message_id"] for r in left] == ["n"], "old events go, recent ones stay"
    async with Engine.open(
        make_settings(database_url, event_retention_hours=0), migrate_schema=False
    ) as engine:
        await engine.db.pool.execute("UPDATE events SET received_at = now() - interval '5 years'")
        worker = engine.worker()
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(1)
        worker.stop()
        await task
        assert await engine.db.pool.fetchval("SELECT count(*) FROM events") == 1, "0 keeps everything"
