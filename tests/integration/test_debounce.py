"""Debounce: a burst of events becomes one run that receives every event of the window."""

from __future__ import annotations

import asyncio
from typing import Any

from agentflow.engine import DEFAULT_WORKSPACE, Engine
from agentflow.runtime.scheduler import Scheduler
from agentflow.webhooks import Fired
from tests.integration.test_dispatch import dispatch_all, triggered


def debounced(name: str, **debounce: Any) -> dict[str, Any]:
    return triggered(
        name,
        {"topics": ["ticket.*"], "debounce": {"seconds": 60, **debounce}},
        {"id": "done", "type": "finish", "output": {"last": "{{ payload.n }}"}},
    )


async def close_all(engine: Engine) -> None:
    """Make every open window due, then let the scheduler close them."""
    await engine.db.pool.execute("UPDATE debounce_windows SET fire_at = now()")
    await Scheduler(engine.db).tick()


async def fire(
    engine: Engine, workflow: str, payload: dict[str, Any], request_id: str | None = None
) -> Fired:
    version = await engine.webhooks.target(workflow, workspace_id=DEFAULT_WORKSPACE)
    return await engine.webhooks.fire(
        version, payload, source="private", request_id=request_id, workspace_id=DEFAULT_WORKSPACE
    )


async def test_a_burst_becomes_one_run_with_every_event(engine: Engine) -> None:
    await engine.publish_workflow(debounced("burst", key="ticket_id"))
    await engine.events.publish(
        [
            {"topic": "ticket.updated", "message_id": f"u{n}", "data": {"ticket_id": "T1", "n": n}}
            for n in range(5)
        ]
        + [{"topic": "ticket.updated", "message_id": "other", "data": {"ticket_id": "T2", "n": 99}}]
    )
    await dispatch_all(engine)
    assert await engine.db.pool.fetchval("SELECT count(*) FROM runs") == 0, "no run while the window is open"
    got = await engine.db.pool.fetch("SELECT decision, reason FROM dispatch_decisions ORDER BY id")
    assert {r["decision"] for r in got} == {"debounced"}
    assert [r["reason"]["window_events"] for r in got] == [1, 2, 3, 4, 5, 1]
    await Scheduler(engine.db).tick()
    assert await engine.db.pool.fetchval("SELECT count(*) FROM runs") == 0, "a window closes only when due"
    await close_all(engine)
    assert len(await engine.list_runs()) == 2, "one run per debounce key"
    rows = await engine.db.pool.fetch("SELECT id, input, trigger FROM runs ORDER BY input->>'n'")
    t1, t2 = rows
    assert t1["input"] == {"ticket_id": "T1", "n": 4}, "the run's payload is the window's last event"
    window = t1["trigger"]["debounced"]
    assert window["key"] == "T1"
    assert [e["message_id"] for e in window["events"]] == ["u0", "u1", "u2", "u3", "u4"]
    assert [e["message_id"] for e in t2["trigger"]["debounced"]["events"]] == ["other"]
    inbox = await engine.db.pool.fetch(
        "SELECT kind, payload->>'message_id' AS mid FROM run_inbox WHERE run_id = $1 ORDER BY id", t1["id"]
    )
    assert [(r["kind"], r["mid"]) for r in inbox] == [("trigger", f"u{n}") for n in range(5)]
    settled = await engine.db.pool.fetch(
        "SELECT DISTINCT decision, run_id FROM dispatch_decisions WHERE event_message_id LIKE 'u%'"
    )
    assert [(r["decision"], r["run_id"]) for r in settled] == [("debounced", t1["id"])], (
        "each event names its run"
    )
    assert await engine.db.pool.fetchval("SELECT count(*) FROM debounce_windows") == 0
    assert await engine.db.pool.fetchval("SELECT count(*) FROM debounce_events") == 0


async def test_the_window_moves_with_each_event_up_to_max_wait(engine: Engine) -> None:
    await engine.publish_workflow(debounced("sliding", key="ticket_id", seconds=10, max_wait=15))

    async def window() -> dict[str, Any]:
        row = await engine.db.pool.fetchrow(
            "SELECT extract(epoch FROM fire_at - first_at)::float8 AS after_first,"
            " extract(epoch FROM fire_at - last_at)::float8 AS after_last, events FROM debounce_windows"
        )
        return dict(row)

    await engine.events.publish([{"topic": "ticket.x", "message_id": "a", "data": {"ticket_id": "T"}}])
    await dispatch_all(engine)
    first = await window()
    assert abs(first["after_first"] - 10) < 0.01, first
    # Pretend the window opened 8 s ago: the next event may push it only to first + 15 s.
    await engine.db.pool.execute(
        "UPDATE debounce_windows SET first_at = first_at - interval '8 s', last_at = last_at - interval '8 s'"
    )
    await engine.events.publish([{"topic": "ticket.x", "message_id": "b", "data": {"ticket_id": "T"}}])
    await dispatch_all(engine)
    second = await window()
    assert second["events"] == 2
    assert abs(second["after_first"] - 15) < 0.5, "capped at max_wait after the first event"
    assert second["after_last"] < 10, "not the full debounce time after the last event"


async def test_events_without_the_key_and_webhooks(engine: Engine) -> None:
    await engine.publish_workflow(debounced("keyed", key="customer.id"))
    missing = await fire(engine, "keyed", {"n": 1})
    assert missing.decision.decision == "started", "a payload without the debounce key runs at once"
    assert "no debounce key" in missing.decision.reason["debounce"]
    calls = [await fire(engine, "keyed", {"customer.id": "c-9", "n": n}, f"r{n}") for n in range(3)]
    assert [c.debounced for c in calls] == [True, True, True], "flat key fallback"
    replay = await fire(engine, "keyed", {"customer.id": "c-9", "n": 7}, "r1")
    assert replay.replayed and replay.debounced, "a repeated call is not a new event of the window"
    await close_all(engine)
    runs = [r for r in await engine.list_runs() if r.trigger and r.trigger.get("debounced")]
    assert len(runs) == 1 and runs[0].input == {"customer.id": "c-9", "n": 2}
    assert runs[0].trigger is not None and runs[0].trigger["source"] == "private"
    assert len(runs[0].trigger["debounced"]["events"]) == 3


async def test_a_closing_window_enrolls_into_the_keys_active_run(engine: Engine) -> None:
    config = triggered(
        "enrolling",
        {
            "topics": ["ticket.*"],
            "enrollment": {"key": "{{ event.data.ticket_id }}"},
            "debounce": {"seconds": 30},
        },
    )
    await engine.publish_workflow(config)
    await engine.events.publish([{"topic": "ticket.a", "message_id": "1", "data": {"ticket_id": "T"}}])
    await dispatch_all(engine)
    await close_all(engine)
    (run,) = await engine.list_runs()
    assert run.status.value == "created" and run.enrollment_key == "T"
    await engine.events.publish(
        [{"topic": "ticket.a", "message_id": str(n), "data": {"ticket_id": "T"}} for n in (2, 3)]
    )
    await dispatch_all(engine)
    await close_all(engine)
    assert len(await engine.list_runs()) == 1, "the key's run is still active: no second run"
    inbox = await engine.db.pool.fetch(
        "SELECT kind, payload->>'message_id' AS mid FROM run_inbox WHERE run_id = $1 ORDER BY id", run.id
    )
    assert [(r["kind"], r["mid"]) for r in inbox] == [("trigger", "1"), ("event", "2"), ("event", "3")]
    reasons = await engine.db.pool.fetch(
        "SELECT reason->'window_closed'->>'outcome' AS outcome FROM dispatch_decisions WHERE event_message_id IN"
        " ('2', '3')"
    )
    assert [r["outcome"] for r in reasons] == ["enrolled", "enrolled"]


async def test_a_window_of_a_disabled_workflow_starts_nothing(engine: Engine) -> None:
    await engine.publish_workflow(debounced("switched", key="ticket_id"))
    await engine.events.publish([{"topic": "ticket.x", "message_id": "a", "data": {"ticket_id": "T"}}])
    await dispatch_all(engine)
    await engine.set_flags("switched", enabled=False)
    await close_all(engine)
    assert await engine.db.pool.fetchval("SELECT count(*) FROM runs") == 0
    decision = await engine.db.pool.fetchval("SELECT decision FROM dispatch_decisions")
    assert decision == "workflow_disabled"
    assert await engine.db.pool.fetchval("SELECT count(*) FROM debounce_windows") == 0


async def test_the_worker_closes_windows_on_time(engine: Engine) -> None:
    await engine.publish_workflow(debounced("timed", key="ticket_id", seconds=0.5))
    worker = engine.worker()
    task = asyncio.create_task(worker.run())
    try:
        await engine.events.publish(
            [
                {"topic": "ticket.x", "message_id": str(n), "data": {"ticket_id": "T", "n": n}}
                for n in range(3)
            ]
        )
        runs: list[Any] = []
        for _ in range(200):
            runs = [r for r in await engine.list_runs() if r.status.value == "completed"]
            if runs:
                break
            await asyncio.sleep(0.05)
        assert len(runs) == 1 and runs[0].output == {"last": 2}
        opened_to_closed = await engine.db.pool.fetchval(
            "SELECT extract(epoch FROM r.created_at - e.received_at)::float8 FROM runs r, events e"
            " WHERE e.message_id = '2'"
        )
        assert opened_to_closed >= 0.5, "never before the window's time (database clock)"
    finally:
        worker.stop()
        await task
