"""Waits that end when something arrives in the run's inbox, and ``{{ inbox }}``.

The race that matters: a delivery that commits while the run is entering its wait must still
wake it. The checkpoint reads the delivery count from the run's own row, which a delivery
updates; the negative control shows that a check over ``run_inbox`` in the same statement
misses a delivery that committed while the checkpoint waited for the row lock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import asyncpg
import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.core.inbox import Inbox
from agentflow.core.records import RunRecord
from agentflow.engine import DEFAULT_WORKSPACE, Engine
from agentflow.runtime.worker import Worker
from agentflow.store import checkpoints, inbox, runs

WS = DEFAULT_WORKSPACE


def flow(name: str, *nodes: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": list(nodes)}


def wait_for_event(node_id: str = "wait", duration: str = "1h") -> dict[str, Any]:
    return {"id": node_id, "type": "wait", "duration": duration, "wake_on_event": True}


def show_inbox(node_id: str) -> dict[str, Any]:
    return {"id": node_id, "type": "tool", "tool": "echo", "args": {"value": "{{ inbox }}"}}


@pytest.fixture
async def worker(engine: Engine) -> AsyncIterator[Worker]:
    w = engine.worker(concurrency=4, dispatch=False)
    task = asyncio.create_task(w.run())
    yield w
    w.stop()
    await asyncio.wait_for(task, 10)


async def until(engine: Engine, run_id: UUID, check: Any, timeout: float = 10.0) -> RunRecord:
    deadline = time.monotonic() + timeout
    while True:
        run = await engine.get_run(run_id)
        if check(run):
            return run
        assert time.monotonic() < deadline, f"run stuck: {run.status} {run.status_reason}"
        await asyncio.sleep(0.02)


def waiting_for_event(run: RunRecord) -> bool:
    return run.status == "waiting" and run.status_reason == "awaiting_event"


async def deliver(engine: Engine, run_id: UUID, payload: dict[str, Any], kind: str = "event") -> None:
    async with engine.db.pool.acquire() as conn, conn.transaction():
        assert await inbox.deliver(conn, WS, run_id, kind, payload)


async def inbox_rows(engine: Engine, run_id: UUID) -> list[tuple[Any, ...]]:
    rows = await engine.db.pool.fetch(
        "SELECT kind, payload, consumed_seq, consumed_at IS NOT NULL AS consumed FROM run_inbox"
        " WHERE run_id = $1 ORDER BY id",
        run_id,
    )
    return [(r["kind"], r["payload"], r["consumed_seq"], r["consumed"]) for r in rows]


async def test_a_task_change_wakes_its_run_within_a_second(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow(
            "follow-up",
            {"id": "ask", "type": "tool", "tool": "make_task", "args": {"title": "Call Acme"}},
            wait_for_event("await_task", "1h"),
            show_inbox("react"),
            {"id": "done", "type": "finish", "output": {"saw": "{{ steps.react.value | length }}"}},
        )
    )
    run = await engine.start_run("follow-up")
    await until(engine, run.id, waiting_for_event)
    (task,) = await engine.tasks.list(run_id=run.id)

    changed = time.monotonic()
    update = await engine.tasks.complete(task.id)
    assert update.delivered
    done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    steps = await engine.list_steps(run.id)
    woke = next(s for s in steps if s.node_id == "react")
    assert woke.finished_at is not None
    assert time.monotonic() - changed < 1.0, "the run did not wake within a second of the change"

    (seen,) = woke.output["value"]
    assert seen["kind"] == "task"
    assert seen["payload"]["topic"] == "task.completed"
    assert seen["payload"]["message_id"] == f"task:{task.id}:1"
    assert seen["payload"]["data"]["changes"]["status"] == {"old": "open", "new": "completed"}
    assert seen["payload"]["data"]["task"]["status"] == "completed"
    assert done.output == {"saw": 1}
    assert await inbox_rows(engine, run.id) == [("task", seen["payload"], woke.seq, True)]


async def test_without_the_option_a_wait_is_not_cut_short(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow(
            "patient",
            {"id": "ask", "type": "tool", "tool": "make_task", "args": {"title": "Call Acme"}},
            {"id": "nap", "type": "wait", "duration": "1h"},
            show_inbox("later"),
        )
    )
    run = await engine.start_run("patient")
    asleep = await until(engine, run.id, lambda r: r.status == "waiting")
    assert asleep.status_reason == "timer"
    (task,) = await engine.tasks.list(run_id=run.id)
    assert (await engine.tasks.complete(task.id)).delivered
    await asyncio.sleep(1.0)
    still = await engine.get_run(run.id)
    assert still.status == "waiting" and still.due_at == asleep.due_at, "a plain wait was cut short"
    [(kind, _, _, consumed)] = await inbox_rows(engine, run.id)
    assert kind == "task" and not consumed, "the change waits in the inbox for the next step"


async def test_each_delivery_is_seen_by_one_step_and_consumed_once(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow(
            "twice",
            wait_for_event("first_wait"),
            show_inbox("first"),
            wait_for_event("second_wait"),
            show_inbox("second"),
        )
    )
    run = await engine.start_run("twice")
    await until(engine, run.id, waiting_for_event)
    await deliver(engine, run.id, {"n": 1})
    await until(engine, run.id, lambda r: waiting_for_event(r) and r.step_seq == 3)
    await asyncio.sleep(0.5)
    assert waiting_for_event(await engine.get_run(run.id)), "an already consumed delivery woke the run again"
    await deliver(engine, run.id, {"n": 2})
    done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    outputs = {s.node_id: s.output for s in await engine.list_steps(run.id) if s.status == "completed"}
    assert [item["payload"] for item in outputs["first"]["value"]] == [{"n": 1}]
    assert [item["payload"] for item in outputs["second"]["value"]] == [{"n": 2}]
    assert outputs["first_wait"]["wake_on_event"] is True
    rows = await inbox_rows(engine, run.id)
    assert [(payload, seq, consumed) for _, payload, seq, consumed in rows] == [
        ({"n": 1}, 1, True),
        ({"n": 2}, 3, True),
    ]


async def test_a_delivery_no_step_has_seen_ends_the_wait_at_once(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow(
            "early",
            {"id": "nap", "type": "wait", "duration": "1s"},
            wait_for_event("await_more"),
            show_inbox("react"),
        )
    )
    run = await engine.start_run("early")
    await until(engine, run.id, lambda r: r.status == "waiting" and r.status_reason == "timer")
    await deliver(engine, run.id, {"arrived": "while napping"})
    done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed", done.error
    outputs = {s.node_id: s.output for s in await engine.list_steps(run.id)}
    assert outputs["await_more"] == {"woken_by": "inbox", "pending": 1}
    assert [i["payload"] for i in outputs["react"]["value"]] == [{"arrived": "while napping"}]


async def test_a_delivery_during_a_step_is_seen_by_the_next_step(engine: Engine, worker: Worker) -> None:
    await engine.publish_workflow(
        flow(
            "busy",
            {"id": "work", "type": "tool", "tool": "sleepy", "args": {"seconds": 1.0}},
            show_inbox("next"),
            show_inbox("after_next"),
        )
    )
    run = await engine.start_run("busy")
    await until(engine, run.id, lambda r: r.lease_owner is not None)
    await deliver(engine, run.id, {"during": "work"})
    done = await until(engine, run.id, lambda r: r.status.is_terminal)
    assert done.status == "completed" and done.fencing_token == 1, "one claim: refreshed without a release"
    outputs = {s.node_id: s.output for s in await engine.list_steps(run.id)}
    assert [i["payload"] for i in outputs["next"]["value"]] == [{"during": "work"}]
    assert outputs["after_next"]["value"] == [], "consumed by the step that saw it"


# The checkpoint itself, driven by hand: no worker, exact interleavings.


async def held_run(engine: Engine) -> tuple[RunRecord, int]:
    """A run claimed by worker "w", as a worker holds it before its wait step's checkpoint."""
    await engine.publish_workflow(flow("held", wait_for_event("w8"), show_inbox("after")))
    run = await engine.start_run("held")
    (claimed,) = await runs.claim(engine.db.pool, "w", 1, 30.0, 3)
    assert claimed.run.id == run.id and claimed.inbox_seq == 0
    return claimed.run, claimed.run.fencing_token


def wait_checkpoint(run: RunRecord, seen: int, reason: str = "awaiting_event") -> tuple[Any, ...]:
    move = runs.RunWrite(
        "waiting", reason, {"node": "after"}, None, None, True, wake_after=3600.0, inbox_seen=seen
    )
    step = runs.StepWrite(0, 1, "w8", "wait", None, "completed", None, {"at_most": 3600}, None, 0.0)
    return move, step


async def test_a_delivery_before_the_wait_checkpoint_makes_the_run_due_at_once(engine: Engine) -> None:
    run, token = await held_run(engine)
    seen = (await inbox.load(engine.db.pool, WS, run.id)).seen  # what the step saw: nothing
    await deliver(engine, run.id, {"late": True})
    move, step = wait_checkpoint(run, seen)
    done = await runs.checkpoint(engine.db.pool, WS, run.id, token, "w", move, step)
    assert done is not None and done.status == "waiting"
    assert done.due_in is not None and done.due_in <= 0, "the delivery was lost: the run sleeps an hour"
    assert done.inbox_seq == 1


async def test_a_plain_wait_checkpoint_ignores_deliveries(engine: Engine) -> None:
    run, token = await held_run(engine)
    await deliver(engine, run.id, {"late": True})
    move, step = wait_checkpoint(run, 0, reason="timer")
    done = await runs.checkpoint(engine.db.pool, WS, run.id, token, "w", move, step)
    assert done is not None and done.due_in is not None and done.due_in > 3500


async def _checkpoint_behind_a_delivery(engine: Engine, statement: str | None) -> float:
    """Hold a delivery's transaction open, start the wait checkpoint (it blocks on the run's
    row), then commit the delivery; return how soon the checkpoint made the run due."""
    run, token = await held_run(engine)
    move, step = wait_checkpoint(run, 0)
    async with engine.db.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        assert await inbox.deliver(conn, WS, run.id, "event", {"racing": True})
        if statement is None:
            pending = asyncio.ensure_future(
                runs.checkpoint(engine.db.pool, WS, run.id, token, "w", move, step)
            )
        else:
            args = [WS, run.id, token, "w", "waiting", "awaiting_event", move.state, None, None, 1, 3600.0, None,
                    0, 1, "w8", "wait", None, "completed", None, None, None, 0.0, 0, 0, 1]  # fmt: skip
            pending = asyncio.ensure_future(engine.db.pool.fetchrow(statement, *args))
        await asyncio.sleep(0.3)
        assert not pending.done(), "the checkpoint should wait for the delivery's row lock"
        await tx.commit()
    done = await asyncio.wait_for(pending, 5)
    assert done is not None
    due_in = done.due_in if isinstance(done, runs.Checkpointed) else done["due_in"]
    assert due_in is not None
    return float(due_in)


async def test_a_delivery_racing_the_checkpoint_is_not_lost(engine: Engine) -> None:
    assert await _checkpoint_behind_a_delivery(engine, None) <= 0


async def test_negative_control_a_run_inbox_subquery_loses_the_racing_delivery(engine: Engine) -> None:
    naive = checkpoints._statement().replace(
        "inbox_seq > $23::bigint",
        "$23::bigint >= 0 AND EXISTS (SELECT 1 FROM run_inbox i WHERE i.workspace_id = $1"
        " AND i.run_id = $2 AND i.consumed_at IS NULL)",
    )
    assert naive != checkpoints._statement()
    due_in = await _checkpoint_behind_a_delivery(engine, naive)
    assert due_in > 3500, "the statement snapshot hid the delivery: the wake-up is lost"


async def test_a_delivery_behind_the_checkpoint_wakes_the_run(engine: Engine) -> None:
    run, token = await held_run(engine)
    move, step = wait_checkpoint(run, 0)
    async with engine.db.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        done = await runs.checkpoint(conn, WS, run.id, token, "w", move, step)  # type: ignore[arg-type]
        assert done is not None and done.due_in is not None and done.due_in > 3500
        delivery = asyncio.ensure_future(deliver(engine, run.id, {"after": True}))
        await asyncio.sleep(0.3)
        assert not delivery.done(), "the delivery should wait for the checkpoint's row lock"
        await tx.commit()
    await asyncio.wait_for(delivery, 5)
    woken = await engine.get_run(run.id)
    assert woken.status == "waiting" and woken.due_at is not None
    assert await engine.db.pool.fetchval("SELECT due_at <= now() FROM runs WHERE id = $1", run.id)


async def test_loading_counts_every_delivery_or_says_there_is_more(engine: Engine) -> None:
    await engine.publish_workflow(flow("loaded", wait_for_event("w8"), show_inbox("after")))
    run = await engine.start_run("loaded")
    assert await inbox.load(engine.db.pool, WS, run.id) == Inbox(0, ())
    for n in range(3):
        await deliver(engine, run.id, {"n": n})
    whole = await inbox.load(engine.db.pool, WS, run.id)
    assert whole.seen == 3 and [i.payload for i in whole.items] == [{"n": 0}, {"n": 1}, {"n": 2}]
    cut = await inbox.load(engine.db.pool, WS, run.id, limit=2)
    assert cut.seen == -1 and len(cut.items) == 2, "a cut load must make the next checkpoint look again"
    assert await engine.db.pool.fetchval("SELECT inbox_seq FROM runs WHERE id = $1", run.id) == 3
    await engine.db.pool.execute(
        "INSERT INTO run_inbox (workspace_id, run_id, kind, payload, consumed_at, consumed_seq)"
        " VALUES ($1, $2, 'trigger', '{}', now(), 0)",
        WS,
        run.id,
    )
    assert (await inbox.load(engine.db.pool, WS, run.id)).seen == 3, "rows stored as consumed do not count"


async def test_heartbeats_survive_deliveries_that_lock_runs_in_another_order(engine: Engine) -> None:
    """A delivery updates its run's row; a transaction delivering to two held runs can deadlock
    with the heartbeat that extends both leases. The heartbeat must come through."""
    await engine.publish_workflow(flow("pair", show_inbox("a")))
    for _ in range(2):
        await engine.start_run("pair")
    claimed = await runs.claim(engine.db.pool, "w", 2, 30.0, 3)
    held = sorted(((c.run.workspace_id, c.run.id, c.run.fencing_token) for c in claimed), key=lambda h: h[1])
    deadlocks = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
    before = await engine.db.pool.fetchval(deadlocks)
    # PostgreSQL looks for a deadlock once, deadlock_timeout after a wait began, and fails the
    # side that looks. The heartbeat waits first and looks after 3 s; this transaction, waiting
    # second, would look only after a minute: the heartbeat finds the cycle and is the side
    # that yields, however late a loaded machine lets this transaction join it (with both at
    # one second it joined 1 s late once in CI, looked first, and failed itself instead).
    beats = await asyncpg.create_pool(
        engine.db.url, min_size=1, max_size=1, server_settings={"deadlock_timeout": "3s"}
    )
    try:
        for first, second in (held, held[::-1]):  # one of the two orders crosses the heartbeat's
            async with engine.db.pool.acquire() as conn:
                tx = conn.transaction()
                await tx.start()
                await conn.execute("SET LOCAL deadlock_timeout = '60s'")
                await inbox.deliver(conn, WS, second[1], "event", {})
                beat = asyncio.ensure_future(runs.heartbeat(beats, "w", held, 30.0))
                # The heartbeat waits (for `second`, or for `first` in the order that does not
                # cross) before this transaction waits too.
                await _until_waiting_for_a_lock(engine, "lease_expires_at")
                await inbox.deliver(conn, WS, first[1], "event", {})
                await tx.commit()
            assert await asyncio.wait_for(beat, 20) == {held[0][1], held[1][1]}
    finally:
        await beats.close()
    assert await engine.db.pool.fetchval(deadlocks) > before, "the test no longer provokes the deadlock"


async def _until_waiting_for_a_lock(engine: Engine, statement: str, timeout: float = 20.0) -> None:
    """Until a backend running a statement that holds ``statement`` waits for a row lock."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await engine.db.pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'"
        " AND pid <> pg_backend_pid()",
        statement,
    ):
        assert loop.time() < deadline, "the heartbeat never waited for a lock"
        await asyncio.sleep(0.01)
