"""Lifecycle events (issue 16): run.started, run.completed, run.failed, step.failed and
request.created go to the event log with the change they tell of, once each, when a workflow
listens to them, and other workflows trigger on them; a run started by one publishes none (no
workflow triggers itself)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import pytest

import tests.support.tools  # noqa: F401  (registers the tools)
from agentflow.engine import DEFAULT_WORKSPACE, Engine
from agentflow.runtime.dispatcher import Dispatcher
from agentflow.runtime.gatekeeper import Gatekeeper, GateQuestion, GateVerdict
from agentflow.runtime.scheduler import Scheduler
from agentflow.store import runs
from tests.conftest import make_settings
from tests.integration.test_dispatch import dispatch_all
from tests.support.agents import running_worker, until


async def events_of(engine: Engine, run_id: UUID) -> list[tuple[str, str, dict[str, Any]]]:
    rows = await engine.db.pool.fetch(
        "SELECT topic, message_id, data FROM events WHERE data->>'run_id' = $1 ORDER BY xid, seq", str(run_id)
    )
    return [(r["topic"], r["message_id"], r["data"]) for r in rows]


def flow(name: str, *nodes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "structured", "nodes": list(nodes), **extra}


LISTENER = {
    "name": "watch",
    "kind": "structured",
    "trigger": {
        "topics": ["run.*", "step.*", "request.*"],
        "conditions": {"path": "topic", "op": "equals", "value": "-"},
    },
    "nodes": [{"id": "done", "type": "finish", "output": "heard"}],
}
"""Listens to every lifecycle topic and starts nothing (its condition never holds)."""


async def test_a_run_tells_its_start_its_failed_attempts_and_its_end(engine: Engine) -> None:
    await engine.publish_workflow(LISTENER)
    await engine.publish_workflow(
        flow("fine", {"id": "add", "type": "tool", "tool": "add", "args": {"a": 1, "b": 2}})
    )
    breaks = {
        "id": "boom",
        "type": "tool",
        "tool": "always_fails",
        "retry": {"max_attempts": 2, "initial_delay": "0.05s"},
    }
    await engine.publish_workflow(flow("breaks", breaks))
    await engine.publish_workflow(flow("asks", {"id": "ask", "type": "user_input", "message": "OK?"}))
    async with running_worker(engine):
        fine = await engine.start_run("fine", {})
        broken = await engine.start_run("breaks", {})
        asking = await engine.start_run("asks", {})
        await until(engine, fine.id, lambda r: r.status.is_terminal)
        await until(engine, broken.id, lambda r: r.status.is_terminal, timeout=30)
        await until(engine, asking.id, lambda r: r.status == "waiting")
    topics = [topic for topic, _, _ in await events_of(engine, fine.id)]
    assert topics == ["run.started", "run.completed"]
    failed = await events_of(engine, broken.id)
    assert [t for t, _, _ in failed] == ["run.started", "step.failed", "step.failed", "run.failed"]
    attempts = [
        (d["node_id"], d["attempt"], d["run_status"], d["error"]["code"])
        for t, _, d in failed
        if t == "step.failed"
    ]
    assert attempts == [("boom", 1, "waiting", "upstream_down"), ("boom", 2, "failed", "upstream_down")]
    assert failed[-1][2]["error"]["code"] == "upstream_down" and failed[-1][2]["workflow_id"] == str(
        broken.workflow_id
    )
    (request,) = await engine.requests.list(run_id=asking.id)
    asked = [(t, m, d) for t, m, d in await events_of(engine, asking.id) if t == "request.created"]
    assert asked == [("request.created", str(request["id"]), asked[0][2])]
    assert asked[0][2]["kind"] == "approval" and asked[0][2]["node_id"] == "ask"


async def test_an_alerting_workflow_triggers_on_run_failed_and_does_not_trigger_itself(
    engine: Engine,
) -> None:
    await engine.publish_workflow(
        flow("fragile", {"id": "boom", "type": "tool", "tool": "always_fails", "args": {"retryable": False}})
    )
    alert = flow(
        "alert",
        {
            "id": "tell",
            "type": "tool",
            "tool": "echo",
            "args": {"value": "{{ payload.workflow_id }} failed"},
        },
        {"id": "boom", "type": "tool", "tool": "always_fails", "args": {"retryable": False}},
        trigger={"topics": ["run.failed"]},
    )
    await engine.publish_workflow(alert)
    async with running_worker(engine):
        run = await engine.start_run("fragile", {})
        await until(engine, run.id, lambda r: r.status.is_terminal)
        for _ in range(300):
            alerts = await engine.list_runs(workflow="alert")
            if alerts and alerts[0].status.is_terminal:
                break
            await asyncio.sleep(0.1)
        alerts = await engine.list_runs(workflow="alert")
        assert len(alerts) == 1 and alerts[0].status == "failed", alerts
        # The alert's own failure publishes nothing, so nothing starts another alert.
        assert await events_of(engine, alerts[0].id) == []
        steps = await engine.list_steps(alerts[0].id)
    assert steps[0].output == {"value": f"{run.workflow_id} failed"}


@pytest.fixture
async def quiet(database_url: str) -> AsyncIterator[Engine]:
    eng = await Engine.connect(make_settings(database_url, lifecycle_events=False), migrate_schema=False)
    yield eng
    await eng.close()


async def test_nothing_is_published_that_no_workflow_listens_to(engine: Engine) -> None:
    await engine.publish_workflow(
        flow("unwatched", {"id": "add", "type": "tool", "tool": "add", "args": {"a": 1, "b": 1}})
    )
    await engine.publish_workflow({**LISTENER, "trigger": {**LISTENER["trigger"], "topics": ["run.failed"]}})
    async with running_worker(engine):
        run = await engine.start_run("unwatched", {})
        await until(engine, run.id, lambda r: r.status.is_terminal)
    assert await events_of(engine, run.id) == [], "nobody listens to run.started or run.completed"


async def test_lifecycle_events_can_be_turned_off(quiet: Engine) -> None:
    await quiet.publish_workflow(LISTENER)
    await quiet.publish_workflow(
        flow("silent", {"id": "add", "type": "tool", "tool": "add", "args": {"a": 1, "b": 1}})
    )
    async with running_worker(quiet):
        run = await quiet.start_run("silent", {})
        await until(quiet, run.id, lambda r: r.status.is_terminal)
    assert await events_of(quiet, run.id) == []


async def test_a_cancel_tells_run_canceled_once_at_once_or_at_the_step_boundary(engine: Engine) -> None:
    await engine.publish_workflow(LISTENER)
    await engine.publish_workflow(flow("napper", {"id": "nap", "type": "wait", "duration": "1h"}))
    await engine.publish_workflow(
        flow(
            "busy",
            {"id": "slow", "type": "tool", "tool": "sleepy", "args": {"seconds": 1.5}},
            {"id": "end", "type": "finish", "output": 1},
        )
    )
    async with running_worker(engine):
        waiting = await engine.start_run("napper", {})
        await until(engine, waiting.id, lambda r: r.status == "waiting")
        await engine.cancel_run(waiting.id)  # no worker holds it: canceled at once
        busy = await engine.start_run("busy", {})
        await until(engine, busy.id, lambda r: r.status == "in_progress" and r.lease_owner is not None)
        requested = await engine.cancel_run(busy.id)  # a worker runs its step: at its end
        assert requested.status == "in_progress" and requested.cancel_requested
        await until(engine, busy.id, lambda r: r.status.is_terminal, timeout=30)
    for run_id in (waiting.id, busy.id):
        told = [(t, d["reason"]) for t, _, d in await events_of(engine, run_id) if t == "run.canceled"]
        assert told == [("run.canceled", "canceled_by_request")], (run_id, told)


async def lost_until_the_claim_fails_it(engine: Engine, run_id: UUID, workspace_id: UUID) -> None:
    """Workers that began the run's step and died, as many times as the rescue limit allows."""
    for i in range(engine.settings.max_rescues + 1):
        [held] = await runs.claim(engine.db.pool, f"lost-{i}", 1, 30.0, engine.settings.max_rescues)
        assert held.run.id == run_id and held.run.status == "in_progress"
        assert await runs.begin(engine.db.pool, workspace_id, run_id, held.run.fencing_token, f"lost-{i}")
        await engine.db.pool.execute(
            "UPDATE runs SET lease_expires_at = now() - interval '1 second',"
            " due_at = now() - interval '1 second' WHERE id = $1",
            run_id,
        )


async def test_a_run_the_claim_ends_tells_it_like_a_checkpoint(engine: Engine) -> None:
    await engine.publish_workflow(flow("fragile", {"id": "end", "type": "finish", "output": 1}))
    unheard = await engine.start_run("fragile", {})
    await lost_until_the_claim_fails_it(engine, unheard.id, unheard.workspace_id)
    async with running_worker(engine):  # nobody listens yet: the claim fails it and tells nobody
        await until(engine, unheard.id, lambda r: r.status.is_terminal)
    assert (await engine.get_run(unheard.id)).status_reason == "worker_lost"
    assert await events_of(engine, unheard.id) == []

    await engine.publish_workflow(LISTENER)
    canceled = await engine.start_run("fragile", {})
    [held] = await runs.claim(engine.db.pool, "ghost", 1, 30.0, engine.settings.max_rescues)
    assert held.run.id == canceled.id
    assert (await engine.cancel_run(canceled.id)).cancel_requested  # its worker is alive: later
    lost = await engine.start_run("fragile", {})
    await lost_until_the_claim_fails_it(engine, lost.id, lost.workspace_id)
    await engine.db.pool.execute(
        "UPDATE runs SET lease_expires_at = now() - interval '1 second', due_at = now() - interval '1 second'"
        " WHERE id = $1",
        canceled.id,
    )  # ... and then the ghost died: the next claim cancels the run
    async with running_worker(engine):
        for run_id in (lost.id, canceled.id):
            await until(engine, run_id, lambda r: r.status.is_terminal)
    [(topic, message_id, data)] = await events_of(engine, lost.id)
    assert (topic, message_id) == ("run.failed", f"{lost.id}:0")
    assert data["reason"] == "worker_lost" and data["error"]["code"] == "worker_lost"
    assert (data["workflow_id"], data["version"]) == (str(lost.workflow_id), 1)
    told = await events_of(engine, canceled.id)
    assert [(t, m, d["reason"]) for t, m, d in told] == [
        ("run.canceled", str(canceled.id), "canceled_by_request")
    ]


async def test_a_restart_tells_run_canceled_of_the_run_it_replaces(engine: Engine) -> None:
    trigger = {"topics": ["ticket.updated"], "mode": "restart", "enrollment": {"key": "{{ event.data.id }}"}}
    await engine.publish_workflow(
        flow("restarting", {"id": "nap", "type": "wait", "duration": "1h"}, trigger=trigger)
    )
    dispatcher = Dispatcher(engine.db).consumer()

    async def restarted(message_id: str) -> list[UUID]:
        await engine.events.publish(
            [{"topic": "ticket.updated", "message_id": message_id, "data": {"id": "t-1"}}]
        )
        while await dispatcher.consume_batch():
            pass
        rows = await engine.db.pool.fetch(
            "SELECT id FROM runs WHERE status = 'canceled' ORDER BY canceled_at"
        )
        return [r["id"] for r in rows]

    await restarted("u1")
    [unheard] = await restarted("u2")  # nobody listens yet: canceled, told nobody
    assert await events_of(engine, unheard) == []
    await engine.publish_workflow(LISTENER)
    [_, replaced] = await restarted("u3")
    told = [(t, m, d["reason"]) for t, m, d in await events_of(engine, replaced)]
    assert told == [("run.canceled", str(replaced), "restarted_by_event")]


RESTART = {"mode": "restart", "enrollment": {"key": "{{ event.data.id }}"}}
NAP = {"id": "nap", "type": "wait", "duration": "1h"}


async def canceled_runs(engine: Engine) -> list[UUID]:
    rows = await engine.db.pool.fetch("SELECT id FROM runs WHERE status = 'canceled' ORDER BY canceled_at")
    return [r["id"] for r in rows]


async def test_a_restart_by_a_webhook_call_tells_run_canceled(engine: Engine) -> None:
    await engine.publish_workflow(flow("hooked", NAP, trigger=RESTART))
    await engine.publish_workflow(LISTENER)
    version = await engine.webhooks.target("hooked", workspace_id=DEFAULT_WORKSPACE)
    for call in ("c1", "c2"):
        fired = await engine.webhooks.fire(
            version, {"id": "t-1"}, source="private", request_id=call, workspace_id=DEFAULT_WORKSPACE
        )
    assert fired.decision.decision == "restarted"
    [replaced] = await canceled_runs(engine)
    told = [(t, m, d["reason"]) for t, m, d in await events_of(engine, replaced)]
    assert told == [("run.canceled", str(replaced), "restarted_by_event")]


async def test_a_restart_by_a_closing_debounce_window_tells_run_canceled(engine: Engine) -> None:
    trigger = {"topics": ["ticket.*"], "debounce": {"seconds": 60}, **RESTART}
    await engine.publish_workflow(flow("settling", NAP, trigger=trigger))
    await engine.publish_workflow(LISTENER)
    for burst in ("b1", "b2"):  # two windows, one after the other, for the same key
        await engine.events.publish([{"topic": "ticket.updated", "message_id": burst, "data": {"id": "t-1"}}])
        await dispatch_all(engine)
        await engine.db.pool.execute("UPDATE debounce_windows SET fire_at = now()")
        await Scheduler(engine.db).tick()
    [replaced] = await canceled_runs(engine)
    told = [(t, m, d["reason"]) for t, m, d in await events_of(engine, replaced)]
    assert told == [("run.canceled", str(replaced), "restarted_by_event")]


class YesGate:
    async def decide(self, question: GateQuestion) -> GateVerdict:
        return GateVerdict(True, "yes")


async def test_a_restart_after_the_gate_said_yes_tells_run_canceled(engine: Engine) -> None:
    await engine.publish_workflow(
        {"name": "gated", "kind": "agent", "prompt": "Help.", "sources": [{"type": "signal"}],
         "gate": {}, "trigger": RESTART}
    )  # fmt: skip
    await engine.publish_workflow(LISTENER)
    keeper = Gatekeeper(engine.db, YesGate(), owner="test")
    for signal in ("s1", "s2"):
        await engine.events.publish([{"topic": "signal.churn", "message_id": signal, "data": {"id": "a-1"}}])
        await dispatch_all(engine)
        assert await keeper.work_once() == 1
    [replaced] = await canceled_runs(engine)
    told = [(t, m, d["reason"]) for t, m, d in await events_of(engine, replaced)]
    assert told == [("run.canceled", str(replaced), "restarted_by_event")]
