"""The dispatcher: events start the right runs, once; later events join the active run."""

from __future__ import annotations

import asyncio
from typing import Any

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.core.events import Position
from agentflow.engine import Engine
from agentflow.runtime.dispatcher import Dispatcher
from agentflow.store import events as store_events


def triggered(name: str, trigger: dict[str, Any], *nodes: dict[str, Any]) -> dict[str, Any]:
    body = list(nodes) or [{"id": "nap", "type": "wait", "duration": "1h"}]
    return {"name": name, "kind": "structured", "trigger": trigger, "nodes": body}


async def dispatch_all(engine: Engine) -> int:
    consumer = Dispatcher(engine.db).consumer()
    total = 0
    while (n := await consumer.consume_batch()) > 0:
        total += n
    return total


async def decisions(engine: Engine) -> list[tuple[str, str, str | None]]:
    rows = await engine.db.pool.fetch(
        "SELECT event_message_id, decision, enrollment_key FROM dispatch_decisions ORDER BY id"
    )
    return [(r["event_message_id"], r["decision"], r["enrollment_key"]) for r in rows]


async def test_events_start_runs_and_later_ones_join_the_active_run(engine: Engine) -> None:
    await engine.publish_workflow(
        triggered(
            "per-account", {"topics": ["email.*"], "enrollment": {"key": "{{ event.data.account_id }}"}}
        )
    )
    await engine.events.publish(
        [
            {"topic": "email.received", "message_id": "e1", "data": {"account_id": "acme", "n": 1}},
            {"topic": "email.sent", "message_id": "e2", "data": {"account_id": "acme", "n": 2}},
            {"topic": "email.received", "message_id": "e3", "data": {"account_id": "globex", "n": 3}},
            {"topic": "ticket.opened", "message_id": "e4", "data": {"account_id": "acme"}},
        ]
    )
    assert await dispatch_all(engine) == 4
    assert await decisions(engine) == [
        ("e1", "started", "acme"),
        ("e2", "enrolled", "acme"),
        ("e3", "started", "globex"),
    ]
    runs = {r.enrollment_key: r for r in await engine.list_runs()}
    assert set(runs) == {"acme", "globex"}
    assert runs["acme"].input == {"account_id": "acme", "n": 1}, "the run's payload is the event's data"
    inbox = await engine.db.pool.fetch(
        "SELECT kind, payload->>'message_id' AS mid FROM run_inbox WHERE run_id = $1 ORDER BY id",
        runs["acme"].id,
    )
    assert [(r["kind"], r["mid"]) for r in inbox] == [("trigger", "e1"), ("event", "e2")]


async def test_redelivered_events_are_decided_once(engine: Engine) -> None:
    await engine.publish_workflow(triggered("once", {"topics": ["t"]}))
    await engine.events.publish([{"topic": "t", "message_id": "x"}])
    dispatcher = Dispatcher(engine.db)
    events = await store_events.read_after(engine.db.pool, Position.start(), 10)
    for _ in range(2):  # as if the batch were delivered again after a crash
        async with engine.db.pool.acquire() as conn, conn.transaction():
            await dispatcher.handle(conn, events)
    assert len(await engine.list_runs()) == 1


async def test_conditions_are_rechecked_on_every_event(engine: Engine) -> None:
    trigger = {
        "topics": ["account.updated"],
        "conditions": {
            "all": [
                {"path": "data.tier", "op": "equals", "value": "gold"},
                {"path": "data.churn_risk", "op": "gte", "value": 0.7},
            ]
        },
        "enrollment": {"key": "{{ event.data.id }}"},
    }
    published = await engine.publish_workflow(triggered("churn", trigger))
    await engine.events.publish(
        [{"topic": "account.updated", "message_id": "u1", "data": {"id": "a1", "churn_risk": 0.9}}]
    )
    await dispatch_all(engine)
    await engine.events.publish(
        [
            {
                "topic": "account.updated",
                "message_id": "u2",
                "data": {"id": "a1", "churn_risk": 0.9, "tier": "gold"},
            }
        ]
    )
    await dispatch_all(engine)
    listed = await engine.events.decisions(published.workflow.id)
    assert [(d["event_message_id"], d["decision"]) for d in listed] == [
        ("u2", "started"),
        ("u1", "not_matched"),
    ]
    why = listed[1]["reason"]["conditions"]
    assert why["matched"] is False, "a decision records why"
    assert [(c["path"], c["matched"], c["present"]) for c in why["all"]] == [
        ("data.tier", False, False),
        ("data.churn_risk", True, True),
    ]


async def test_reuse_policies_after_the_run_ended(engine: Engine) -> None:
    for name, reuse in (("r-allow", "allow"), ("r-failed", "allow_if_failed"), ("r-reject", "reject")):
        await engine.publish_workflow(
            triggered(name, {"topics": [f"{name}.go"], "enrollment": {"key": "k", "reuse": reuse}},
                      {"id": "x", "type": "finish"})
        )  # fmt: skip
        await engine.events.publish([{"topic": f"{name}.go", "message_id": "first"}])
    await dispatch_all(engine)
    w = engine.worker(dispatch=False)
    task = asyncio.create_task(w.run())
    for run in await engine.list_runs():
        assert (await engine.wait_for_run(run.id, timeout=10)).status == "completed"
    w.stop()
    await task
    for name in ("r-allow", "r-failed", "r-reject"):
        await engine.events.publish([{"topic": f"{name}.go", "message_id": "second"}])
    await dispatch_all(engine)
    rows = await engine.db.pool.fetch(
        "SELECT event_topic, decision FROM dispatch_decisions WHERE event_message_id = 'second' ORDER BY event_topic"
    )
    assert [(r["event_topic"], r["decision"]) for r in rows] == [
        ("r-allow.go", "started"),
        ("r-failed.go", "reuse_rejected"),
        ("r-reject.go", "reuse_rejected"),
    ]


async def test_drafts_disabled_and_agent_workflows(engine: Engine) -> None:
    await engine.publish_workflow(triggered("drafty", {"topics": ["t"]}), draft=True)
    await engine.publish_workflow(triggered("off", {"topics": ["t"]}), enabled=False)
    await engine.publish_workflow(
        {"name": "agent", "kind": "agent", "prompt": "help", "type": "account", "trigger": {"topics": ["t"]}}
    )
    await engine.events.publish([{"topic": "t", "message_id": "m", "data": {"account_id": "acme"}}])
    await dispatch_all(engine)
    (decided,) = await decisions(engine)
    assert decided[1:] == ("started", "account:acme")  # agent workflows run (drafts, disabled: never)
    (run,) = await engine.list_runs()
    assert run.state == {"agent": {"phase": "decide", "pending": [], "model_calls": 0, "tool_calls": 0,
                                   "tokens": 0, "usd": 0.0}}  # fmt: skip


async def test_a_worker_dispatches_and_runs_what_events_start(engine: Engine) -> None:
    await engine.publish_workflow(
        triggered(
            "greeter",
            {"topics": ["user.signed_up"], "enrollment": {"key": "{{ event.data.email }}"}},
            {"id": "hello", "type": "tool", "tool": "echo", "args": {"value": "hi {{ payload.email }}"}},
        )
    )
    w = engine.worker()
    task = asyncio.create_task(w.run())
    try:
        await engine.events.publish([{"topic": "user.signed_up", "data": {"email": "ada@example.com"}}])
        for _ in range(100):
            runs = await engine.list_runs()
            if runs and runs[0].status == "completed":
                break
            await asyncio.sleep(0.05)
    finally:
        w.stop()
        await task
    assert [(r.status, r.output) for r in runs] == [("completed", {"value": "hi ada@example.com"})]


async def test_concurrent_events_over_few_keys_keep_one_active_run_per_key(engine: Engine) -> None:
    await engine.publish_workflow(
        triggered("busy", {"topics": ["hit"], "enrollment": {"key": "{{ event.data.k }}"}})
    )

    async def publisher(p: int) -> None:
        for i in range(50):
            await engine.events.publish(
                [{"topic": "hit", "message_id": f"{p}-{i}", "data": {"k": f"key{i % 7}"}}]
            )

    consumers = [Dispatcher(engine.db).consumer(batch_size=25) for _ in range(3)]

    async def drain(c: Any) -> None:
        for _ in range(60):
            await c.consume_batch()
            await asyncio.sleep(0.01)

    await asyncio.gather(*[publisher(p) for p in range(4)], *[drain(c) for c in consumers])
    await dispatch_all(engine)
    counts = await engine.db.pool.fetchrow(
        "SELECT count(*) FILTER (WHERE decision = 'started') AS started,"
        " count(*) FILTER (WHERE decision = 'enrolled') AS enrolled, count(*) AS total FROM dispatch_decisions"
    )
    assert (counts["started"], counts["enrolled"], counts["total"]) == (7, 193, 200)
    per_key = await engine.db.pool.fetch(
        "SELECT enrollment_key, count(*) AS n FROM runs WHERE active GROUP BY 1"
    )
    assert all(r["n"] == 1 for r in per_key) and len(per_key) == 7
    inbox = await engine.db.pool.fetchval("SELECT count(*) FROM run_inbox")
    assert inbox == 200, "every event is in its run's inbox (the trigger or a later one)"


async def test_modes_skip_parallel_and_restart(engine: Engine) -> None:
    for mode in ("skip", "parallel", "restart"):
        await engine.publish_workflow(
            triggered(f"m-{mode}", {"topics": [f"{mode}.go"], "mode": mode, "enrollment": {"key": "same"}})
        )
        await engine.events.publish([{"topic": f"{mode}.go", "message_id": f"{mode}-{i}"} for i in range(2)])
    await dispatch_all(engine)
    got = await engine.db.pool.fetch(
        "SELECT event_message_id, decision, reason FROM dispatch_decisions ORDER BY event_message_id"
    )
    assert [(r["event_message_id"], r["decision"]) for r in got] == [
        ("parallel-0", "started"),
        ("parallel-1", "started"),
        ("restart-0", "started"),
        ("restart-1", "restarted"),
        ("skip-0", "started"),
        ("skip-1", "skipped"),
    ]
    runs = await engine.list_runs()
    by_workflow: dict[str, list[Any]] = {}
    for run in runs:
        name = (await engine.get_workflow(run.workflow_id)).name
        by_workflow.setdefault(name, []).append(run)
    assert [r.status for r in by_workflow["m-parallel"]] == ["created", "created"], "parallel runs overlap"
    reason = next(r["reason"] for r in got if r["event_message_id"] == "restart-1")
    # Both runs were created in one dispatcher transaction (same created_at): tell them apart
    # by the run the decision says it canceled.
    old = next(r for r in by_workflow["m-restart"] if str(r.id) == reason["canceled_run"])
    new = next(r for r in by_workflow["m-restart"] if r.id != old.id)
    assert (old.status, old.status_reason, old.enrollment_key) == ("canceled", "restarted_by_event", None)
    assert (new.status, new.enrollment_key) == ("created", "same")
    skip_inbox = await engine.db.pool.fetchval(
        "SELECT count(*) FROM run_inbox WHERE run_id = $1", by_workflow["m-skip"][0].id
    )
    assert skip_inbox == 1, "a skipped event is not delivered"


async def test_restart_of_a_run_mid_step_starts_the_new_run_at_once(engine: Engine) -> None:
    await engine.publish_workflow(
        triggered(
            "restarter",
            {"topics": ["go"], "mode": "restart", "enrollment": {"key": "k"}},
            {"id": "slow", "type": "tool", "tool": "sleepy", "args": {"seconds": 1.0}},
            {"id": "after", "type": "tool", "tool": "echo", "args": {"value": 1}},
        )
    )
    w = engine.worker(dispatch=False)
    task = asyncio.create_task(w.run())
    try:
        await engine.events.publish([{"topic": "go", "message_id": "first"}])
        await dispatch_all(engine)
        (old,) = await engine.list_runs()
        for _ in range(100):
            if (await engine.get_run(old.id)).lease_owner is not None:
                break
            await asyncio.sleep(0.02)
        await engine.events.publish([{"topic": "go", "message_id": "second"}])
        await dispatch_all(engine)
        new = next(r for r in await engine.list_runs() if r.id != old.id)
        assert new.enrollment_key == "k", "the new run holds the key while the old one finishes its step"
        old_done = await engine.wait_for_run(old.id, timeout=10)
        new_done = await engine.wait_for_run(new.id, timeout=10)
    finally:
        w.stop()
        await task
    assert old_done.status == "canceled"
    assert [s.node_id for s in await engine.list_steps(old.id)] == ["slow"], (
        "the old run stopped at the step boundary"
    )
    assert new_done.status == "completed"


async def test_a_poison_pair_is_recorded_as_an_error_instead_of_blocking_the_log(
    engine: Engine, monkeypatch: Any
) -> None:
    import agentflow.runtime.dispatcher as dispatcher_module

    await engine.publish_workflow(triggered("poisoned", {"topics": ["t"]}))
    await engine.events.publish([{"topic": "t", "message_id": m} for m in ("ok-1", "bad", "ok-2")])
    real_admit = dispatcher_module.admit

    async def admit(
        conn: Any, version: Any, config: Any, event: Any, source: str, now: Any, *rest: Any
    ) -> Any:
        if event.message_id == "bad":  # a bug that only this event triggers
            raise RuntimeError("boom")
        return await real_admit(conn, version, config, event, source, now, *rest)

    monkeypatch.setattr(dispatcher_module, "admit", admit)
    consumer = Dispatcher(engine.db).consumer()
    try:
        await consumer.consume_batch()
    except RuntimeError:
        pass
    else:
        raise AssertionError("the first delivery fails as a whole")
    assert await decisions(engine) == [], "nothing of the failed batch was applied"
    assert await consumer.consume_batch() == 3, "the batch is delivered again"
    got = await engine.db.pool.fetch(
        "SELECT event_message_id, decision, reason FROM dispatch_decisions ORDER BY id"
    )
    assert [(r["event_message_id"], r["decision"]) for r in got] == [
        ("ok-1", "started"),
        ("bad", "error"),
        ("ok-2", "started"),
    ]
    assert got[1]["reason"] == {"error": "RuntimeError", "message": "boom"}
    assert await consumer.consume_batch() == 0, "the cursor moved past the poison event"


async def test_a_deadlock_in_the_careful_pass_is_tried_again_not_recorded_as_an_error(
    engine: Engine, monkeypatch: Any
) -> None:
    import asyncpg
    import pytest

    import agentflow.runtime.dispatcher as dispatcher_module

    await engine.publish_workflow(triggered("contended", {"topics": ["t"]}))
    await engine.events.publish([{"topic": "t", "message_id": m} for m in ("a", "b")])
    real_admit = dispatcher_module.admit
    deadlocks = iter([True, True, False])  # the first pass, the careful one, then through

    async def admit(
        conn: Any, version: Any, config: Any, event: Any, source: str, now: Any, *rest: Any
    ) -> Any:
        if event.message_id == "b" and next(deadlocks):  # as PostgreSQL breaks a lock cycle
            raise asyncpg.DeadlockDetectedError("deadlock detected")
        return await real_admit(conn, version, config, event, source, now, *rest)

    monkeypatch.setattr(dispatcher_module, "admit", admit)
    consumer = Dispatcher(engine.db).consumer()
    for _ in range(2):
        with pytest.raises(asyncpg.DeadlockDetectedError):
            await consumer.consume_batch()
        assert await decisions(engine) == [], "nothing of a batch that deadlocked was applied"
    assert await consumer.consume_batch() == 2
    got = await engine.db.pool.fetch("SELECT event_message_id, decision FROM dispatch_decisions ORDER BY id")
    assert [(r["event_message_id"], r["decision"]) for r in got] == [("a", "started"), ("b", "started")]
