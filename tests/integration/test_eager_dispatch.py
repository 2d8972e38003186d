"""Eager starts by the dispatcher (``Settings.eager_start``): the runs a worker's dispatcher
starts are inserted held by that worker while it has free slots, and driven once the batch
committed, with no NOTIFY, claim or begin; the rest wait for a claim as before."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

import agentflow
from agentflow.core.events import Event
from agentflow.core.records import RunRecord
from agentflow.core.tools import ToolRegistry
from agentflow.engine import Engine
from agentflow.runtime.consumer import EventConsumer
from agentflow.runtime.dispatcher import Dispatcher
from agentflow.runtime.worker import Worker
from tests.support import local_worker
from tests.support.local_worker import counted

TOOLS = ToolRegistry()
CALLS: list[Any] = []
GATE: dict[str, asyncio.Event] = {}


@agentflow.tool(name="eager_event_step", registry=TOOLS)
async def eager_event_step(n: Any = None) -> dict[str, Any]:
    """Counts its calls; holds its slot while the test's gate is closed."""
    CALLS.append(n)
    gate = GATE.get("open")
    if gate is not None:
        await gate.wait()
    return {"n": n}


def flow(name: str, trigger: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "structured",
        "trigger": trigger,
        "nodes": [
            {"id": "one", "type": "tool", "tool": "eager_event_step", "args": {"n": "{{ payload.n }}"}}
        ],
    }


KEYLESS = flow("on_ping", {"topics": ["eager.ping"]})
KEYED = flow("per_account", {"topics": ["eager.account"], "enrollment": {"key": "{{ event.data.account }}"}})


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    GATE.clear()


def engine_with_worker(
    url: str, *, eager: bool, concurrency: int = 4, dispatch: bool = True
) -> AbstractAsyncContextManager[tuple[Engine, Worker]]:
    return local_worker.engine_with_worker(
        url, TOOLS, eager=eager, concurrency=concurrency, dispatch=dispatch
    )


async def runs_of(engine: Engine, name: str, count: int, timeout: float = 20) -> list[RunRecord]:
    """The workflow's runs once ``count`` of them ended, oldest first."""
    async with asyncio.timeout(timeout):
        while True:
            found = await engine.list_runs(workflow=name)
            if len(found) >= count and all(r.status.is_terminal for r in found):
                return sorted(found, key=lambda r: (r.created_at, str(r.id)))
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("workflow", [KEYLESS, KEYED], ids=["keyless", "keyed"])
async def test_a_run_the_dispatcher_starts_is_held_by_its_worker_and_runs_without_a_claim(
    database_url: str, workflow: dict[str, Any]
) -> None:
    async with engine_with_worker(database_url, eager=True) as (engine, worker):
        await engine.publish_workflow(workflow)
        eager, claims = counted("eager_starts"), counted("claims")
        topic = workflow["trigger"]["topics"][0]
        await engine.events.publish([{"topic": topic, "message_id": "m1", "data": {"n": 1, "account": "a"}}])
        [run] = await runs_of(engine, workflow["name"], 1)
        steps = await engine.list_steps(run.id)
        assert (counted("eager_starts"), counted("claims")) == (eager + 1, claims)
    assert run.status.value == "completed", run.error
    assert CALLS == [1]
    # Held and begun by the insert, in the dispatcher's transaction (a claim comes later, and
    # is counted).
    assert run.fencing_token == 1 and run.rescues == 0
    assert run.started_at == run.created_at
    assert [(s.node_id, s.worker, s.fencing_token) for s in steps] == [("one", worker.name, 1)]
    assert run.enrollment_key == ("a" if workflow is KEYED else None)


async def test_without_eager_start_the_dispatcher_leaves_its_runs_to_a_claim(database_url: str) -> None:
    async with engine_with_worker(database_url, eager=False) as (engine, _worker):
        await engine.publish_workflow(KEYLESS)
        eager, claims = counted("eager_starts"), counted("claims")
        await engine.events.publish([{"topic": "eager.ping", "message_id": "m1", "data": {"n": 1}}])
        [run] = await runs_of(engine, "on_ping", 1)
        assert counted("eager_starts") == eager and counted("claims") >= claims + 1
    assert run.status.value == "completed" and run.started_at is not None
    assert run.started_at > run.created_at  # claimed after the dispatcher's commit


async def test_a_batch_holds_as_many_runs_as_the_worker_has_free_slots(database_url: str) -> None:
    GATE["open"] = asyncio.Event()
    async with engine_with_worker(database_url, eager=True, concurrency=2) as (engine, worker):
        await engine.publish_workflow(KEYLESS)
        eager = counted("eager_starts")
        events = [{"topic": "eager.ping", "message_id": f"m{n}", "data": {"n": n}} for n in range(5)]
        await engine.events.publish(events)  # one batch for the dispatcher
        async with asyncio.timeout(20):
            while len(CALLS) < 2:
                await asyncio.sleep(0.02)
        rows = await engine.db.pool.fetch(
            "SELECT status, lease_owner, fencing_token FROM runs ORDER BY created_at, id"
        )
        assert len(rows) == 5
        # Two slots: two runs held by this worker (running), three left ready for a claim.
        held = [r for r in rows if r["lease_owner"] is not None]
        assert len(held) == 2 and {r["lease_owner"] for r in held} == {worker.name}
        assert {r["fencing_token"] for r in held} == {1}
        assert sorted(r["status"] for r in rows if r["lease_owner"] is None) == ["created"] * 3
        assert counted("eager_starts") == eager + 2
        GATE["open"].set()
        done = await runs_of(engine, "on_ping", 5)
    assert [r.status.value for r in done] == ["completed"] * 5
    assert sorted(CALLS) == [0, 1, 2, 3, 4]  # each once
    # Held at insert: begun in the dispatcher's transaction; the other three by later claims.
    assert sum(r.started_at == r.created_at for r in done) == 2
    assert counted("eager_starts") == eager + 2


async def test_a_batch_that_rolls_back_hands_nothing_over_and_gives_its_slots_back(database_url: str) -> None:
    async with engine_with_worker(database_url, eager=True, concurrency=2, dispatch=False) as (
        engine,
        worker,
    ):
        await engine.publish_workflow(KEYLESS)
        await engine.publish_workflow(KEYED)
        await engine.events.publish(
            [
                {"topic": "eager.ping", "message_id": "m1", "data": {"n": 1}},
                {"topic": "eager.account", "message_id": "m2", "data": {"n": 2, "account": "a"}},
            ]
        )
        dispatcher = Dispatcher(engine.db, worker)
        seen: list[int] = []

        async def fails_after_the_inserts(conn: Any, batch: list[Event]) -> None:
            await dispatcher.handle(conn, batch)
            seen.append(await conn.fetchval("SELECT count(*) FROM runs WHERE lease_owner = $1", worker.name))
            raise RuntimeError("the batch fails after its runs were inserted")

        consumer = EventConsumer(engine.db, "test.eager", fails_after_the_inserts, settle=dispatcher.settle)
        with pytest.raises(RuntimeError):
            await consumer.consume_batch()
        assert seen == [2]  # both were inserted held (one together, one keyed) ...
        assert await engine.list_runs() == []  # ... and rolled back
        leases = [worker.reserve(), worker.reserve()]  # both slots free again
        assert all(lease is not None for lease in leases) and worker.reserve() is None
        for _ in leases:
            worker.unreserve()
        await asyncio.sleep(0.2)
    assert CALLS == []  # nothing was driven


A1, B2 = {"n": 1, "account": "a"}, {"n": 2, "account": "b"}


async def test_a_webhook_call_starts_its_run_on_the_local_worker(database_url: str) -> None:
    GATE["open"] = asyncio.Event()
    async with engine_with_worker(database_url, eager=True, concurrency=1, dispatch=False) as (
        engine,
        worker,
    ):
        published = await engine.publish_workflow(KEYED)
        version = await engine.webhooks.target(
            published.workflow.id, workspace_id=published.workflow.workspace_id
        )
        ws = version.workspace_id
        eager = counted("eager_starts")
        fired = await engine.webhooks.fire(version, A1, source="private", request_id="r1", workspace_id=ws)
        assert fired.decision.decision == "started" and not fired.replayed
        held = await engine.get_run(fired.decision.run_id)
        assert held.lease_owner == worker.name and held.started_at == held.created_at  # held at insert
        assert counted("eager_starts") == eager + 1
        # The same call again is a replay: it starts nothing and takes no slot.
        again = await engine.webhooks.fire(version, A1, source="private", request_id="r1", workspace_id=ws)
        assert again.replayed and again.decision.run_id == held.id
        # The only slot is busy: the next call's run waits for a claim.
        other = await engine.webhooks.fire(version, B2, source="private", request_id="r2", workspace_id=ws)
        waiting = await engine.get_run(other.decision.run_id)
        assert waiting.status.value == "created" and waiting.lease_owner is None
        GATE["open"].set()
        done = [await engine.wait_for_run(r, timeout=20) for r in (held.id, waiting.id)]
    assert [r.status.value for r in done] == ["completed", "completed"]
    assert sorted(CALLS) == [1, 2]
    assert counted("eager_starts") == eager + 1


async def test_a_webhook_call_that_starts_nothing_gives_its_slot_back(database_url: str) -> None:
    skip = flow("skipper", {"enrollment": {"key": "one"}, "mode": "skip"})
    async with engine_with_worker(database_url, eager=True, concurrency=2, dispatch=False) as (
        engine,
        worker,
    ):
        GATE["open"] = asyncio.Event()
        published = await engine.publish_workflow(skip)
        version = await engine.webhooks.target(
            published.workflow.id, workspace_id=published.workflow.workspace_id
        )
        ws = version.workspace_id
        first = await engine.webhooks.fire(
            version, {"n": 1}, source="private", request_id="a", workspace_id=ws
        )
        second = await engine.webhooks.fire(
            version, {"n": 2}, source="private", request_id="b", workspace_id=ws
        )
        assert (first.decision.decision, second.decision.decision) == ("started", "skipped")
        lease = worker.reserve()  # one slot held by the first run; the skipped call's is free again
        assert lease is not None and worker.reserve() is None
        worker.unreserve()
        GATE["open"].set()
        assert (await engine.wait_for_run(first.decision.run_id, timeout=20)).status.value == "completed"
    assert CALLS == [1]
