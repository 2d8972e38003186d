"""A wait for an event (``for_event``, as Inngest's waitForEvent) end to end: the dispatcher
answers the run whose condition an event meets, with that event, once; other events and other
runs' events do not; the timeout gives null."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest

from agentflow.core.errors import ConfigError
from agentflow.core.events import Position
from agentflow.engine import Engine
from agentflow.runtime.dispatcher import Dispatcher
from agentflow.runtime.event_waits import answer_waits
from agentflow.store import events as store_events
from tests.support.agents import running_worker, until


def waits_for(
    name: str, match: Any = None, *, duration: str = "1h", topic: str = "order.shipped"
) -> dict[str, Any]:
    wait: dict[str, Any] = {
        "id": "shipped",
        "type": "wait",
        "duration": duration,
        "for_event": {"topic": topic},
    }
    if match is not None:
        wait["for_event"]["match"] = match
    return {
        "name": name,
        "kind": "structured",
        "nodes": [wait, {"id": "done", "type": "finish", "output": {"event": "{{ input }}"}}],
    }


MY_ORDER = {"path": "data.order_id", "op": "equals", "value": "{{ payload.order_id }}"}


async def waiting(engine: Engine, run_id: UUID) -> None:
    await until(engine, run_id, lambda r: r.status == "waiting" and r.status_reason == "awaiting_event")


async def test_each_run_gets_the_first_event_that_meets_its_condition(engine: Engine) -> None:
    await engine.publish_workflow(waits_for("ship-wait", MY_ORDER))
    async with running_worker(engine):
        first = await engine.start_run("ship-wait", {"order_id": "A-1"})
        second = await engine.start_run("ship-wait", {"order_id": "B-2"})
        await waiting(engine, first.id)
        await waiting(engine, second.id)
        await engine.events.publish([
            {"topic": "order.paid", "message_id": "p1", "data": {"order_id": "A-1"}},
            {"topic": "order.shipped", "message_id": "s-other", "data": {"order_id": "Z-9"}},
            {"topic": "order.shipped", "message_id": "s-a1", "data": {"order_id": "A-1", "carrier": "DHL"}},
            {"topic": "order.shipped", "message_id": "s-a1-again", "data": {"order_id": "A-1"}},
        ])  # fmt: skip
        done = await until(engine, first.id, lambda r: r.status.is_terminal, timeout=30)
        still = await engine.get_run(second.id)
        await engine.events.publish(
            [{"topic": "order.shipped", "message_id": "s-b2", "data": {"order_id": "B-2"}}]
        )
        other = await until(engine, second.id, lambda r: r.status.is_terminal, timeout=30)
    assert done.status == "completed", done.error
    event = done.output["event"]
    assert (event["topic"], event["message_id"], event["data"]) == (
        "order.shipped",
        "s-a1",
        {"order_id": "A-1", "carrier": "DHL"},
    )
    assert still.status == "waiting", "another order's events do not wake the run"
    assert other.output["event"]["message_id"] == "s-b2"
    (request,) = await engine.requests.list(run_id=first.id, status="answered")
    assert request["kind"] == "event" and request["responded_by"] == "order.shipped/s-a1"
    assert request["spec"]["match"] == {**MY_ORDER, "value": "A-1"}, "the condition is kept as rendered"


async def dispatch_all(engine: Engine) -> None:
    consumer = Dispatcher(engine.db).consumer()
    while await consumer.consume_batch() > 0:
        pass


async def test_the_timeout_gives_null_and_an_event_from_before_the_wait_does_not_count(
    engine: Engine,
) -> None:
    await engine.publish_workflow(waits_for("early", duration="1s"))
    await engine.events.publish([{"topic": "order.shipped", "message_id": "before", "data": {}}])
    await dispatch_all(engine)  # read before the run waits
    async with running_worker(engine):
        run = await engine.start_run("early", {})
        done = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=30)
    assert done.status == "completed" and done.output == {"event": None}
    (request,) = await engine.requests.list(run_id=run.id, status="expired")
    assert request["kind"] == "event"


async def test_a_batch_delivered_again_answers_nothing_twice(engine: Engine) -> None:
    await engine.publish_workflow(waits_for("replayed"))
    async with running_worker(engine, dispatch=False):
        run = await engine.start_run("replayed", {})
        await waiting(engine, run.id)
        await engine.events.publish([{"topic": "order.shipped", "message_id": "once", "data": {"n": 1}}])
        batch = await store_events.read_after(engine.db.pool, Position.start(), 10)
        now = datetime.now(UTC)
        async with engine.db.pool.acquire() as conn, conn.transaction():
            first = await answer_waits(conn, batch, now)
        async with engine.db.pool.acquire() as conn, conn.transaction():
            again = await answer_waits(conn, batch, now)
        done = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=30)
    assert (first, again) == (1, 0)
    assert done.output["event"]["message_id"] == "once"
    deliveries = await engine.db.pool.fetchval("SELECT count(*) FROM run_inbox WHERE run_id = $1", run.id)
    assert deliveries == 1


async def test_a_match_that_renders_to_a_bad_condition_fails_the_step(engine: Engine) -> None:
    match = {"path": "data.n", "op": "gte", "value": "{{ payload.word }}"}
    await engine.publish_workflow(waits_for("bad-render", match))
    async with running_worker(engine):
        run = await engine.start_run("bad-render", {"word": "many"})
        done = await until(engine, run.id, lambda r: r.status.is_terminal, timeout=30)
    assert done.status == "failed" and done.error is not None
    assert done.error["code"] == "wait_match_invalid" and "for_event.match" in done.error["message"]


@pytest.mark.parametrize(
    ("wait", "words"),
    [
        ({"duration": "1h", "for_event": {"topic": "bad topic"}}, "should match pattern"),
        ({"duration": "1h", "for_event": {"topic": "t", "match": {"path": "x", "op": "resembles"}}}, "match"),
        ({"duration": "1h", "wake_on_event": True, "for_event": {"topic": "t"}}, "do not go together"),
        ({"for_event": {"topic": "t"}}, "exactly one of 'duration' or 'until'"),
    ],
)
async def test_a_wait_for_an_event_is_checked_at_publish(
    engine: Engine, wait: dict[str, Any], words: str
) -> None:
    config = {"name": "bad", "kind": "structured", "nodes": [{"id": "w", "type": "wait", **wait}]}
    with pytest.raises(ConfigError) as info:
        await engine.publish_workflow(config)
    assert words in str(info.value.info.details["errors"]), info.value.info.details
